// NNG's scalability protocols (SP) spoken over a plain byte stream
// (nng_stream) rather than through an NNG socket: the 8-byte greeting, then
// length-prefixed messages. NNG up to 1.5.2 (Debian 12's) cannot close a
// socket while a message is arriving on it: its TCP transport resubmits a
// read on the closed pipe, the read is dropped, and NNG's one reaper thread
// waits for it forever, after which no socket in the process closes and no
// dialer reconnects (fixed in NNG 1.6.0). A stream this library reads itself
// has no such state to leave behind, so the ends of the control plane that a
// client closes while messages may be arriving (its event stream, its
// requests) speak SP here; the server keeps NNG's sockets.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nng/nng.h>

namespace th::sp {

// Protocol numbers of the greeting.
enum Protocol : uint16_t { kPub = 32, kSub = 33, kReq = 48, kRep = 49 };

// Whether url is dialled as a stream here (tcp://, ipc:// and their kin);
// *ipc says whether it takes the IPC mapping (a type byte before each
// length). Other schemes (ws://, tls+tcp://) are left to NNG's sockets.
bool stream_url(const std::string &url, bool *ipc);

// The SP wire mapping (the same for TCP and IPC): each end first sends
// 0x00 'S' 'P' 0x00, its protocol number (16 bits, big-endian) and two zero
// bytes.
void greeting(Protocol p, uint8_t out[8]);

// Whether the greeting received (theirs) is that of `peer`. One that is not
// is warned about once (*warned) as what listens at url for `what`.
bool greeted_by(const uint8_t theirs[8], Protocol peer, const std::string &url, const char *what, bool *warned);

// Exchanges greetings as `self`; true if the other end is `peer`. One that
// is not is warned about once (*warned) as what listens at url for `what`.
bool greet(nng_stream *stream, nng_aio *aio, Protocol self, Protocol peer, const std::string &url, const char *what,
           bool *warned);

// Receives one message into msg (a vector's storage is aligned enough for
// FlatBuffers). False when the stream failed, or the message is longer than
// max or not framed as a message (*malformed set: the stream is of no use).
bool receive(nng_stream *stream, nng_aio *aio, bool ipc, uint64_t max, std::vector<uint8_t> &msg, bool *malformed);

// One message made of head and body, framed to be sent as it is.
std::vector<uint8_t> frame(bool ipc, const std::vector<uint8_t> &head, const std::vector<uint8_t> &body);

// Between connection attempts: kFirstRetry, doubling up to kLastRetry, as
// NNG's dialers back off (NNG_OPT_RECONNMINT, NNG_OPT_RECONNMAXT).
constexpr std::chrono::milliseconds kFirstRetry{20}, kLastRetry{500};

// Dials url on a thread of its own, again after every loss, backing off as
// NNG's dialers do (kFirstRetry doubling to kLastRetry), and hands each connection to
// serve, with the thread's one aio (its timeout set for a greeting). serve
// returns when it is done with the connection: true if the peer was reached
// (the back-off starts again). The connection is then closed and freed.
class Dialer {
  public:
    using Serve = std::function<bool(nng_stream *stream, nng_aio *aio)>;
    // Throws TH_ERR_INVALID_ARG for a URL it cannot dial (what names it).
    Dialer(const std::string &url, const char *what, Serve serve);
    // Stops: the dial, send or receive in flight fails and the thread ends.
    // Whatever serve uses must outlive this.
    ~Dialer();
    Dialer(const Dialer &) = delete;
    Dialer &operator=(const Dialer &) = delete;

  private:
    void run();
    Serve serve_;
    nng_stream_dialer *dialer_ = nullptr;
    nng_aio *aio_ = nullptr;  // the thread's one operation at a time; stopped to end it
    std::mutex mu_;
    std::condition_variable cv_;  // the wait between connection attempts
    nng_stream *stream_ = nullptr;  // the connection being served, if any
    bool stop_ = false;
    std::thread thread_;
};

}  // namespace th::sp
