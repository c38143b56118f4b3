// NNG's scalability protocols (SP) as bytes on a stream: the 8-byte
// greeting, then length-prefixed messages (IPC puts a type byte before each
// length). The control plane speaks it itself on plain sockets over tcp://
// and ipc:// (control/plain_socket.hpp) rather than through NNG's sockets:
// NNG up to 1.5.2 (Debian 12's) cannot close a socket while a message is
// arriving on it (its TCP transport resubmits a read on the closed pipe, the
// read is dropped, and NNG's one reaper thread waits for it forever, after
// which no socket in the process closes and no dialer reconnects; fixed in
// NNG 1.6.0), and each NNG message crosses threads a plain socket does not.
// NNG sockets at the other end still understand every byte.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace th::sp {

// Protocol numbers of the greeting.
enum Protocol : uint16_t { kPub = 32, kSub = 33, kReq = 48, kRep = 49 };

// A scheme spoken here on a plain socket, as NNG names them: ipc:// and
// unix:// (a socket file), abstract:// (Linux's abstract namespace), tcp://,
// tcp4:// and tcp6://.
struct StreamScheme {
    const char *prefix;  // "tcp4://"
    bool ipc;            // the IPC mapping: a type byte before each length
    bool abstract;       // an abstract socket name, not a file (ipc only)
    int ip_version;      // tcp: 4 or 6 only; 0: either
};

// url's scheme if it is one of those; nullptr for the others (ws://,
// tls+tcp://), which are left to NNG's sockets.
const StreamScheme *stream_scheme(const std::string &url);

// Whether url is spoken here on a plain socket; *ipc says whether it takes
// the IPC mapping.
bool stream_url(const std::string &url, bool *ipc);

// For an error about url that NNG refused: what a control URL looks like,
// when url does not (no "scheme://", or a scheme NNG does not speak); "" when
// it does, so that NNG's own reason stands alone.
std::string url_form_hint(const std::string &url);

// The SP wire mapping (the same for TCP and IPC): each end first sends
// 0x00 'S' 'P' 0x00, its protocol number (16 bits, big-endian) and two zero
// bytes.
void greeting(Protocol p, uint8_t out[8]);

// Whether the greeting received (theirs) is that of `peer`. One that is not
// is warned about once (*warned) as what listens at url for `what`.
bool greeted_by(const uint8_t theirs[8], Protocol peer, const std::string &url, const char *what, bool *warned);

// url with its port replaced ("tcp://h:0" -> "tcp://h:7070",
// "ws://h:0/p" -> "ws://h:7070/p"); url as it is if it names no port.
std::string with_port(const std::string &url, int port);

// One message made of head and body, framed to be sent as it is.
std::vector<uint8_t> frame(bool ipc, const std::vector<uint8_t> &head, const std::vector<uint8_t> &body);

// Between connection attempts: kFirstRetry, doubling up to kLastRetry, as
// NNG's dialers back off (NNG_OPT_RECONNMINT, NNG_OPT_RECONNMAXT).
constexpr std::chrono::milliseconds kFirstRetry{20}, kLastRetry{500};

}  // namespace th::sp
