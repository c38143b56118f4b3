// Request/reply (control/rpc.hpp): calls sharing a connection, sent again to
// a server that comes back, clients ending while late replies arrive, NNG's
// sockets on the other end, what a server drops, ipc socket files,
// giving up a connection while other threads are still calling on it; asking
// a server for its epoch (control/ping.hpp);
// the event stream's receiving end (control/subscriber.hpp).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <dirent.h>
#include <fstream>
#include <future>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include <unistd.h>

#include <nng/nng.h>
#include <nng/protocol/pubsub0/pub.h>
#include <nng/protocol/pubsub0/sub.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/protocol/reqrep0/req.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "common/error.hpp"
#include "control/close.hpp"
#include "control/plain_socket.hpp"
#include "control/ping.hpp"
#include "control/publisher.hpp"
#include "control/rpc.hpp"
#include "control/subscriber.hpp"
#include "test_child.hpp"

using namespace th;

namespace {

wire::Bytes echo(const uint8_t *data, size_t size) { return wire::Bytes(data, data + size); }

// Context switches so far of this process's threads named `name`, and how
// many such threads there are.
struct ThreadSwitches {
    int threads = 0;
    uint64_t switches = 0;
};
ThreadSwitches switches_of_threads_named(const std::string &name) {
    ThreadSwitches total;
    DIR *dir = opendir("/proc/self/task");
    if (dir == nullptr) return total;
    while (dirent *e = readdir(dir)) {
        if (e->d_name[0] == '.') continue;
        std::string task = std::string("/proc/self/task/") + e->d_name;
        std::string comm;
        std::getline(std::ifstream(task + "/comm"), comm);
        if (comm != name) continue;
        ++total.threads;
        std::ifstream status(task + "/status");
        for (std::string line; std::getline(status, line);)
            if (line.find("ctxt_switches:") != std::string::npos)
                total.switches += std::stoull(line.substr(line.find(':') + 1));
    }
    closedir(dir);
    return total;
}

}  // namespace

// A call in flight when the connection is given up ends at once with
// TH_ERR_CLOSED, however long its deadline (its caller moved on to another
// server and asks there), and so does a later call; on plain sockets
// (tcp://) and on NNG's (ws://) alike.
TEST(Rpc, AbandonEndsCallsInFlightAndRefusesLaterOnes) {
    for (const char *listen : {"tcp://127.0.0.1:0", "ws://127.0.0.1:0/rpc"}) {
        SCOPED_TRACE(listen);
        std::atomic<bool> hold{true};
        RpcServer server(listen, [&](const uint8_t *data, size_t size) {
            while (hold) std::this_thread::sleep_for(std::chrono::milliseconds(1));
            return echo(data, size);
        });
        auto client = std::make_shared<RpcClient>(server.url());
        wire::Bytes request{1, 2, 3};
        std::vector<std::thread> callers;
        std::atomic<int> closed{0};
        // One waits for its reply (the reader of the connection), the other
        // to be handed its own.
        for (int i = 0; i < 2; ++i)
            callers.emplace_back([&] {
                try {
                    client->call(request, Deadline(60000));
                    ADD_FAILURE() << "a call in flight got a reply after abandon()";
                } catch (const Error &e) {
                    EXPECT_EQ(e.code(), TH_ERR_CLOSED) << e.what();
                    EXPECT_NE(std::string(e.what()).find("moved on to another server"), std::string::npos) << e.what();
                    closed++;
                }
            });
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
        client->abandon();
        EXPECT_TRUE(client->abandoned());
        for (auto &t : callers) t.join();  // would wait out the 60 s deadline before
        EXPECT_EQ(closed.load(), 2);
        try {
            client->call(request, Deadline(30000));
            ADD_FAILURE() << "a call after abandon() went through";
        } catch (const Error &e) {
            EXPECT_EQ(e.code(), TH_ERR_CLOSED) << e.what();
        }
        // The client goes before the server answers: NNG 1.5.2 leaks now
        // and then a reply that reaches a REQ socket as it closes.
        client.reset();
        hold = false;
    }
}

// Giving up a connection at any moment of the calls on it, over and over:
// every call ends with its reply or TH_ERR_CLOSED, and closing the socket
// afterwards neither hangs nor crashes.
TEST(Rpc, AbandonRacesWithCallsSafely) {
    RpcServer server("tcp://127.0.0.1:0", echo);
    std::mt19937 rng(7);
    for (int round = 0; round < 100; ++round) {
        auto client = std::make_shared<RpcClient>(server.url());
        // The race under test is with calls, not with the dial: NNG 1.5.2 can
        // leak a dialer's pipe when a socket closes while it still connects
        // (seen under LeakSanitizer when the callers had not started yet).
        auto connect_by = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (!client->connected() && std::chrono::steady_clock::now() < connect_by)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        ASSERT_TRUE(client->connected()) << "round " << round;
        std::atomic<int> unexpected{0};
        std::vector<std::thread> callers;
        for (int i = 0; i < 4; ++i)
            callers.emplace_back([&unexpected, client, i] {
                wire::Bytes request{uint8_t(i), 2, 3};
                for (;;) {
                    try {
                        if (client->call(request, Deadline(10000)) != request) unexpected++;
                    } catch (const Error &e) {
                        if (e.code() != TH_ERR_CLOSED) unexpected++;
                        return;
                    }
                }
            });
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));
        client->abandon();
        for (auto &t : callers) t.join();
        client.reset();
        ASSERT_EQ(unexpected.load(), 0) << "round " << round;
    }
}

namespace {

// An NNG REP socket answering each request with the request and one byte
// more, on a thread of its own: what an RpcClient meets in a server that
// predates plain sockets.
class NngEchoServer {
  public:
    explicit NngEchoServer(const std::string &where) {
        EXPECT_EQ(nng_rep0_open(&sock_), 0);
        nng_listener listener;
        EXPECT_EQ(nng_listen(sock_, where.c_str(), &listener, 0), 0);
        url_ = where;
        int port = 0;
        if (where.rfind("tcp://", 0) == 0 && nng_listener_get_int(listener, NNG_OPT_TCP_BOUND_PORT, &port) == 0)
            url_ = where.substr(0, where.rfind(':')) + ":" + std::to_string(port);
        thread_ = std::thread([this] {
            for (;;) {
                nng_msg *msg = nullptr;
                if (nng_recvmsg(sock_, &msg, 0) != 0) return;
                nng_msg_append(msg, "\x01", 1);
                if (nng_sendmsg(sock_, msg, 0) != 0) nng_msg_free(msg);
            }
        });
    }
    ~NngEchoServer() { close(); }
    // True if the close ended within a second (a lost reaper waits forever).
    bool close() {
        if (!thread_.joinable()) return true;
        auto t0 = std::chrono::steady_clock::now();
        nng_close(sock_);
        thread_.join();
        return std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1);
    }
    const std::string &url() const { return url_; }

  private:
    nng_socket sock_ = NNG_SOCKET_INITIALIZER;
    std::string url_;
    std::thread thread_;
};

// What an NNG REQ socket gets back for `request` from the server at url.
wire::Bytes ask_with_nng(const std::string &url, const wire::Bytes &request) {
    nng_socket req = NNG_SOCKET_INITIALIZER;
    EXPECT_EQ(nng_req0_open(&req), 0);
    nng_socket_set_ms(req, NNG_OPT_RECVTIMEO, 5000);
    EXPECT_EQ(nng_dial(req, url.c_str(), nullptr, 0), 0) << url;
    wire::Bytes reply;
    if (nng_send(req, const_cast<uint8_t *>(request.data()), request.size(), 0) == 0) {
        void *buf = nullptr;
        size_t size = 0;
        if (nng_recv(req, &buf, &size, NNG_FLAG_ALLOC) == 0) {
            reply.assign(static_cast<uint8_t *>(buf), static_cast<uint8_t *>(buf) + size);
            nng_free(buf, size);
        }
    }
    nng_close(req);
    return reply;
}

// Whether NNG in this process still closes a socket with a live connection
// at once (a lost reaper makes every close wait out its bound): a REP
// socket, after a request on it.
bool nng_still_closes_sockets() {
    NngEchoServer server("tcp://127.0.0.1:0");
    if (ask_with_nng(server.url(), {1, 2, 3}).size() != 4) return false;
    return server.close();
}

}  // namespace

// Calls from many threads share the connection, each gets its own reply
// (the server answers them out of order), over tcp and over ipc.
TEST(Rpc, CallsInFlightTogetherGetTheirOwnReplies) {
    char dir[] = "/tmp/th-rpc-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    for (std::string where : {std::string("tcp://127.0.0.1:0"), "ipc://" + std::string(dir) + "/rpc"}) {
        RpcServer server(where, [](const uint8_t *data, size_t size) {
            std::this_thread::sleep_for(std::chrono::microseconds(data[0] % 4 * 500));
            return echo(data, size);
        });
        RpcClient client(server.url());
        std::atomic<int> wrong{0}, failed{0};
        std::vector<std::thread> callers;
        for (int t = 0; t < 8; ++t)
            callers.emplace_back([&, t] {
                for (int i = 0; i < 50; ++i) {
                    wire::Bytes request{uint8_t(i), uint8_t(t), 7, 7};
                    try {
                        if (client.call(request, Deadline(20000)) != request) wrong++;
                    } catch (const Error &) {
                        failed++;
                    }
                }
            });
        for (auto &c : callers) c.join();
        EXPECT_EQ(wrong.load(), 0) << where;
        EXPECT_EQ(failed.load(), 0) << where;
    }
    std::remove((std::string(dir) + "/rpc").c_str());
    rmdir(dir);
}

// A call whose server goes before answering is sent again to the server
// that comes back at the same address, within the call's deadline.
TEST(Rpc, ACallIsSentAgainWhenItsServerComesBack) {
    char dir[] = "/tmp/th-rpc-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    for (std::string where : {std::string("tcp://127.0.0.1:0"), "ipc://" + std::string(dir) + "/rpc"}) {
        std::atomic<int> asked{0};
        // The first server takes the request and goes without answering it.
        auto first = std::make_unique<RpcServer>(where, [&](const uint8_t *data, size_t size) {
            asked++;
            std::this_thread::sleep_for(std::chrono::milliseconds(200));
            return echo(data, size);
        });
        std::string url = first->url();
        RpcClient client(url);
        wire::Bytes request{4, 5, 6}, reply;
        std::thread caller([&] {
            try {
                reply = client.call(request, Deadline(20000));
            } catch (const Error &e) {
                ADD_FAILURE() << where << ": " << e.what();
            }
        });
        for (int i = 0; i < 2000 && asked == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        ASSERT_EQ(asked.load(), 1) << where;
        first.reset();  // its handler's reply is dropped as it stops
        RpcServer second(url, [](const uint8_t *data, size_t size) {
            wire::Bytes out = echo(data, size);
            out.push_back(2);
            return out;
        });
        caller.join();
        EXPECT_EQ(reply, (wire::Bytes{4, 5, 6, 2})) << where;
    }
    std::remove((std::string(dir) + "/rpc").c_str());
    rmdir(dir);
}

// A call alone reads its own reply: the connection's thread (which dials
// and watches for the connection's end) is not woken by replies, so a reply
// wakes one thread, the caller's. Calls from two threads at once hand each
// other's replies over. The server going is seen without a call.
TEST(Rpc, ACallReadsItsOwnReplyAndTheConnectionsEndIsSeenWithoutOne) {
    auto server = std::make_unique<RpcServer>("tcp://127.0.0.1:0", echo);
    RpcClient client(server->url());
    ASSERT_EQ(client.call({1}, Deadline(10000)), (wire::Bytes{1}));
    ThreadSwitches before = switches_of_threads_named("th-requests");
    ASSERT_EQ(before.threads, 1) << "the connection's thread is named otherwise: this test needs updating";
    for (uint8_t i = 0; i < 200; ++i) ASSERT_EQ(client.call({i}, Deadline(10000)), (wire::Bytes{i}));
    std::vector<std::thread> callers;
    for (int t = 0; t < 2; ++t)
        callers.emplace_back([&client, t] {
            for (uint8_t i = 0; i < 100; ++i)
                EXPECT_EQ(client.call({uint8_t(t), i}, Deadline(10000)), (wire::Bytes{uint8_t(t), i}));
        });
    for (auto &c : callers) c.join();
    EXPECT_LT(switches_of_threads_named("th-requests").switches - before.switches, 10u);

    server.reset();
    auto gone_by = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (client.connected() && std::chrono::steady_clock::now() < gone_by)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    EXPECT_FALSE(client.connected());
}

// The requests' plain sockets speak NNG's REQ/REP protocol: an NNG REQ
// socket is answered by an RpcServer, an RpcClient by an NNG REP socket
// (clients and servers of earlier releases), over tcp and over ipc. Over
// other schemes (ws://) both ends are NNG's sockets.
TEST(Rpc, PlainSocketsAndNngSocketsSpeakTheSameProtocol) {
    char dir[] = "/tmp/th-rpc-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    for (std::string where : {std::string("tcp://127.0.0.1:0"), "ipc://" + std::string(dir) + "/rpc"}) {
        {
            RpcServer server(where, echo);
            EXPECT_EQ(ask_with_nng(server.url(), {7, 8, 9}), (wire::Bytes{7, 8, 9})) << where;
        }
        NngEchoServer nng(where);
        RpcClient client(nng.url());
        EXPECT_EQ(client.call({7, 8, 9}, Deadline(10000)), (wire::Bytes{7, 8, 9, 1})) << where;
    }
    RpcServer ws("ws://127.0.0.1:0/rpc", echo);
    EXPECT_NE(ws.url(), "ws://127.0.0.1:0/rpc") << "the port bound is not said";
    RpcClient client(ws.url());
    EXPECT_EQ(client.call({4, 2}, Deadline(10000)), (wire::Bytes{4, 2})) << ws.url();
    rmdir(dir);
}

// A connection that does not speak REQ (another protocol's greeting, a
// message longer than any) is dropped by the server, which goes on
// answering the others.
TEST(Rpc, AServerDropsWhatIsNotARequestAndAnswersTheRest) {
    RpcServer server("tcp://127.0.0.1:0", echo);
    RpcClient client(server.url());
    std::string why;
    auto dropped = [&](const std::vector<uint8_t> &bytes) {
        plain::Fd fd = plain::dial(server.url(), Deadline(5000), -1, &why);
        EXPECT_TRUE(fd) << why;
        EXPECT_TRUE(plain::write_all(fd.get(), bytes.data(), bytes.size(), nullptr));
        // Its greeting (8 bytes), then the end of the stream.
        uint8_t greeting[8];
        EXPECT_TRUE(plain::read_all(fd.get(), greeting, sizeof greeting, Deadline(5000)));
        uint8_t more;
        Deadline deadline(10000);
        return plain::wait(fd.get(), POLLIN, -1, &deadline) == plain::Ready::Yes && ::recv(fd.get(), &more, 1, 0) == 0;
    };
    uint8_t req[8], sub[8];
    sp::greeting(sp::kReq, req);
    sp::greeting(sp::kSub, sub);
    std::vector<uint8_t> too_long(req, req + 8);
    for (uint8_t b : {0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x80, 0, 0, 1}) too_long.push_back(b);
    EXPECT_TRUE(dropped(std::vector<uint8_t>(sub, sub + 8)));
    EXPECT_TRUE(dropped(too_long));
    EXPECT_EQ(client.call({1, 2}, Deadline(10000)), (wire::Bytes{1, 2}));
}

// A connection that never greets is dropped after the greeting timeout,
// by the request server and by the event publisher alike (as NNG's
// handshake timeout does), while one that greeted stays.
TEST(Rpc, AConnectionThatNeverGreetsIsDroppedAfterTheGreetingTimeout) {
    RpcServer server("tcp://127.0.0.1:0", echo);
    th::Publisher pub("tcp://127.0.0.1:0");
    RpcClient client(server.url());
    std::string why;
    std::vector<plain::Fd> silent;
    for (const std::string &url : {server.url(), pub.url()}) {
        silent.push_back(plain::dial(url, Deadline(5000), -1, &why));
        ASSERT_TRUE(silent.back()) << why;
    }
    auto t0 = std::chrono::steady_clock::now();
    for (const plain::Fd &fd : silent) {
        uint8_t greeting[8], more;
        EXPECT_TRUE(plain::read_all(fd.get(), greeting, sizeof greeting, Deadline(5000)));
        Deadline deadline(plain::kGreetingTimeoutMs + 10000);
        EXPECT_TRUE(plain::wait(fd.get(), POLLIN, -1, &deadline) == plain::Ready::Yes && ::recv(fd.get(), &more, 1, 0) == 0);
    }
    EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(plain::kGreetingTimeoutMs - 100));
    EXPECT_EQ(client.call({5}, Deadline(10000)), (wire::Bytes{5}));
    EXPECT_TRUE(client.connected());
}

// An address that cannot be one is refused at once, saying what is wrong
// with it, by a client and by a server.
TEST(Rpc, AMalformedAddressIsRefusedAtOnceSayingWhy) {
    struct Case {
        std::string url, says;
        bool server;
    };
    for (const Case &c : {Case{"tcp://127.0.0.1:http", "is not a port number", false},
                          Case{"tcp://127.0.0.1:99999", "is not a port number", true},
                          Case{"tcp://127.0.0.1", "has no port", false}, Case{"tcp://:7070", "names no host", false},
                          Case{"ipc://", "socket path is empty", true},
                          Case{"127.0.0.1:7070", "a control URL is tcp://host:port", false},
                          Case{"127.0.0.1:7070", "a control URL is tcp://host:port", true},
                          Case{"htp://127.0.0.1:7070", "a control URL is tcp://host:port", false},
                          Case{"htp://127.0.0.1:7070", "a control URL is tcp://host:port", true}}) {
        try {
            if (c.server) RpcServer server(c.url, echo);
            else RpcClient client(c.url);
            ADD_FAILURE() << c.url << " accepted";
        } catch (const Error &e) {
            EXPECT_EQ(e.code(), TH_ERR_INVALID_ARG) << c.url;
            EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos) << e.what();
        }
    }
}

// A socket file that nothing accepts on (its server ended without removing
// it) is listened on again; one a server still accepts on is not.
TEST(Rpc, AServerListensOnAStaleIpcSocketFileButNotOnALiveOne) {
    char dir[] = "/tmp/th-rpc-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    const std::string path = std::string(dir) + "/rpc";
    int stale = socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un un{};
    un.sun_family = AF_UNIX;
    std::snprintf(un.sun_path, sizeof un.sun_path, "%s", path.c_str());
    ASSERT_EQ(bind(stale, reinterpret_cast<sockaddr *>(&un), sizeof un), 0);
    ::close(stale);  // the file stays
    {
        RpcServer server("ipc://" + path, echo);
        RpcClient client(server.url());
        EXPECT_EQ(client.call({3}, Deadline(10000)), (wire::Bytes{3}));
        try {
            RpcServer second("ipc://" + path, echo);
            ADD_FAILURE() << "a second server listens where the first does";
        } catch (const Error &e) {
            EXPECT_EQ(e.code(), TH_ERR_UNAVAILABLE) << e.what();
            EXPECT_NE(std::string(e.what()).find("in use"), std::string::npos) << e.what();
        }
    }
    EXPECT_NE(access(path.c_str(), F_OK), 0) << "the server left its socket file";
    rmdir(dir);
}

// The server of the test below, in a process of its own: started by it, it
// echoes each request after a fraction of a millisecond, says where it
// listens and serves until told to end.
TEST(RpcServerProcess, DISABLED_EchoesLateUntilTold) {
    const char *dir = std::getenv("TH_TEST_RPC_SERVER");
    if (dir == nullptr) GTEST_SKIP() << "started by Rpc.EndingWhileLateRepliesArriveLeavesNngAbleToClose";
    RpcServer server("tcp://127.0.0.1:0", [](const uint8_t *data, size_t size) {
        std::this_thread::sleep_for(std::chrono::microseconds(200 + data[0] % 8 * 100));
        return echo(data, size);
    });
    test::write_file(std::string(dir) + "/url", server.url());
    while (!test::wait_for_file(std::string(dir) + "/done")) {
    }
}

// NNG up to 1.5.2 loses its one reaper thread for good when a socket closes
// while a message is arriving on it (control/sp_stream.hpp). Replies to
// calls that gave up arrive at any moment, so a client that ended while one
// was in flight risked it (with NNG's REQ socket this loses the reaper
// within 20 clients). Clients, which use no NNG socket now, end while late
// replies arrive, and NNG still closes sockets afterwards. The server runs
// in a process of its own, from when it was an NNG REP socket that met the
// same bug when a client's connection closed while requests arrived.
TEST(Rpc, EndingWhileLateRepliesArriveLeavesNngAbleToClose) {
    test::TestChild server("RpcServerProcess.*", "TH_TEST_RPC_SERVER");
    ASSERT_TRUE(server.started());
    test::wait_for_file(server.dir() + "/url");
    std::string url;
    std::ifstream(server.dir() + "/url") >> url;
    ASSERT_FALSE(url.empty()) << "the server process did not start";

    std::mt19937 rng(11);
    for (int round = 0; round < 100; ++round) {
        auto client = std::make_unique<RpcClient>(url);
        auto connect_by = std::chrono::steady_clock::now() + std::chrono::seconds(10);
        while (!client->connected() && std::chrono::steady_clock::now() < connect_by)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        ASSERT_TRUE(client->connected()) << "round " << round;
        std::atomic<bool> stop{false};
        std::vector<std::thread> callers;
        for (int i = 0; i < 4; ++i)
            callers.emplace_back([&, i] {
                for (uint8_t n = 0; !stop; ++n) {
                    try {
                        client->call({uint8_t(n + i), 1, 2, 3, 4, 5, 6, 7}, Deadline(1));  // gives up before its reply
                    } catch (const Error &) {
                    }
                }
            });
        std::this_thread::sleep_for(std::chrono::microseconds(500 + rng() % 3000));
        stop = true;
        for (auto &c : callers) c.join();
        auto t0 = std::chrono::steady_clock::now();
        client.reset();
        ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1)) << "round " << round;
    }
    EXPECT_TRUE(nng_still_closes_sockets());
}

// A close that never ends (NNG 1.5's can wait forever on its reaper) holds
// its caller no longer than the bound; the close goes on by itself.
TEST(Close, AHungCloseReleasesItsCallerAtTheBound) {
    auto release = std::make_shared<std::promise<void>>();
    auto closed = std::make_shared<std::atomic<bool>>(false);
    std::shared_future<void> go = release->get_future().share();
    auto t0 = std::chrono::steady_clock::now();
    EXPECT_FALSE(close_within([go, closed] {
        go.wait();
        *closed = true;
    }, std::chrono::milliseconds(200), "a test socket"));
    auto waited = std::chrono::steady_clock::now() - t0;
    EXPECT_GE(waited, std::chrono::milliseconds(200));
    EXPECT_FALSE(*closed);
    release->set_value();
    for (int i = 0; i < 200 && !*closed; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_TRUE(*closed) << "the close did not go on after its caller left";
    EXPECT_TRUE(close_within([] {}, std::chrono::milliseconds(2000), "a test socket"));
}

// Which NNG versions lose their reaper on a close during a message (before
// 1.6.0), read as numbers: "1.10.0" is after "1.6.0".
TEST(Close, KnowsWhichNngLosesItsReaper) {
    EXPECT_TRUE(nng_loses_its_reaper("1.5.2"));
    EXPECT_TRUE(nng_loses_its_reaper("1.3.0"));
    EXPECT_FALSE(nng_loses_its_reaper("1.6.0"));
    EXPECT_FALSE(nng_loses_its_reaper("1.10.1"));
    EXPECT_FALSE(nng_loses_its_reaper("2.0.0-dev"));
    EXPECT_FALSE(nng_loses_its_reaper("garbage"));
    EXPECT_FALSE(nng_loses_its_reaper(nullptr));
}

// ping_server (control/ping.hpp): the epoch a server answers with; a port
// nobody listens on fails at once instead of at the deadline (a failover
// asks the server it left before taking over, and a killed server must not
// cost the whole wait); a server that never answers fails at the deadline.
TEST(Ping, AnswersWithTheServersEpochAndFailsAtOnceOnARefusedConnection) {
    RpcServer server("tcp://127.0.0.1:0", [](const uint8_t *, size_t) {
        wire::Builder b(64);
        wire::Header h;
        h.epoch = 42;
        return wire::finish(b, h, wire::CreatePong(b, 42));
    });
    EXPECT_EQ(ping_server(server.url(), "", Deadline(10000)), 42u);

    std::string dead;
    {
        RpcServer gone("tcp://127.0.0.1:0", echo);
        dead = gone.url();
    }
    auto start = std::chrono::steady_clock::now();
    try {
        ping_server(dead, "", Deadline(20000));
        ADD_FAILURE() << "a closed port answered";
    } catch (const Error &e) {
        EXPECT_EQ(e.code(), TH_ERR_UNAVAILABLE) << e.what();
    }
    // Far from the 20 s deadline: the refusal itself ends it.
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));

    std::atomic<bool> hold{true};
    RpcServer silent("tcp://127.0.0.1:0", [&](const uint8_t *data, size_t size) {
        while (hold) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        return echo(data, size);
    });
    try {
        ping_server(silent.url(), "", Deadline(300));
        ADD_FAILURE() << "a silent server answered";
    } catch (const Error &e) {
        EXPECT_TRUE(e.code() == TH_ERR_TIMEOUT || e.code() == TH_ERR_UNAVAILABLE) << e.what();
    }
    hold = false;
}

namespace {

// A PUB socket listening on `where` (a tcp URL with port 0, or an ipc URL),
// and the URL subscribers dial.
struct NngPublisher {
    nng_socket sock = NNG_SOCKET_INITIALIZER;
    std::string url;
    explicit NngPublisher(const std::string &where) {
        EXPECT_EQ(nng_pub0_open(&sock), 0);
        nng_listener listener;
        EXPECT_EQ(nng_listen(sock, where.c_str(), &listener, 0), 0) << where;
        url = where;
        int port = 0;
        if (where.rfind("tcp", 0) == 0 && nng_listener_get_int(listener, NNG_OPT_TCP_BOUND_PORT, &port) == 0)
            url = "tcp://127.0.0.1:" + std::to_string(port);
    }
    ~NngPublisher() { EXPECT_TRUE(close_socket(sock, "the test's PUB socket")); }
    void send(const std::string &m) { nng_send(sock, const_cast<char *>(m.data()), m.size(), NNG_FLAG_NONBLOCK); }
    // PUB/SUB drops what is sent before a subscriber is connected: sends
    // until `got` counts one.
    bool send_until(const std::atomic<int> &got, const std::string &m = "event") {
        auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (got == 0 && std::chrono::steady_clock::now() < until) {
            send(m);
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        return got > 0;
    }
};

}  // namespace

// The event stream's receiving end delivers what an NNG PUB socket
// publishes, waits for the next event without waking (a receive that woke
// every 100 ms through NNG 1.5's timer thread, which spins up to a
// millisecond on every timeout that fires, cost an idle client ~1% of a
// core), and stops promptly while waiting.
TEST(Subscriber, DeliversEventsWaitsWithoutTimersAndStopsWhileWaiting) {
    NngPublisher pub("tcp://127.0.0.1:0");
    std::atomic<int> got[2] = {0, 0};
    std::vector<std::unique_ptr<Subscriber>> subs;
    for (int i = 0; i < 2; ++i)
        subs.push_back(std::make_unique<Subscriber>(pub.url, [&got, i](const uint8_t *data, size_t size) {
            if (std::string(reinterpret_cast<const char *>(data), size) == "event") ++got[i];
        }));
    // Each subscriber has one.
    ASSERT_TRUE(pub.send_until(got[0]));
    ASSERT_TRUE(pub.send_until(got[1]));

    // Idle for a second: two receives with a 100 ms timeout woke at least
    // 20 times.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ThreadSwitches before = switches_of_threads_named("th-subscriber");
    ASSERT_EQ(before.threads, 2) << "the subscribers' threads are named otherwise: this test needs updating";
    std::this_thread::sleep_for(std::chrono::seconds(1));
    EXPECT_LT(switches_of_threads_named("th-subscriber").switches - before.switches, 5u);

    auto stopped = std::async(std::launch::async, [&] { subs.clear(); });
    EXPECT_EQ(stopped.wait_for(std::chrono::seconds(10)), std::future_status::ready);
    stopped.wait();
}

// The receiving end reads NNG's SP mapping itself: whole messages over TCP
// and over IPC (whose frames carry a type byte), each delivered as sent.
TEST(Subscriber, ReadsTheEventStreamOverTcpAndIpc) {
    const std::string ipc = "ipc:///tmp/th-subscriber-test-" + std::to_string(getpid());
    for (const std::string &where : {std::string("tcp://127.0.0.1:0"), ipc}) {
        SCOPED_TRACE(where);
        NngPublisher pub(where);
        std::mutex mu;
        std::vector<std::string> seen;
        std::atomic<int> got{0};
        Subscriber sub(pub.url, [&](const uint8_t *data, size_t size) {
            std::lock_guard lk(mu);
            seen.emplace_back(reinterpret_cast<const char *>(data), size);
            ++got;
        });
        ASSERT_TRUE(pub.send_until(got, "hello"));
        // Once connected, nothing is dropped at this pace: sizes from empty
        // to the 64 KiB bound.
        for (size_t n : {size_t{0}, size_t{1}, size_t{300}, size_t{64} << 10}) pub.send(std::string(n, 'x'));
        auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (got < 5 && std::chrono::steady_clock::now() < until)
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        std::lock_guard lk(mu);
        ASSERT_GE(seen.size(), 5u);
        size_t first = 0;
        while (first < seen.size() && seen[first] == "hello") ++first;
        ASSERT_EQ(seen.size() - first, 4u);
        EXPECT_EQ(seen[first], "");
        EXPECT_EQ(seen[first + 1], "x");
        EXPECT_EQ(seen[first + 2], std::string(300, 'x'));
        EXPECT_EQ(seen[first + 3], std::string(64 << 10, 'x'));
    }
}

// A server that goes away and comes back on the same address is found again.
TEST(Subscriber, ConnectsAgainWhenTheServerComesBack) {
    auto pub = std::make_unique<NngPublisher>("tcp://127.0.0.1:0");
    const std::string url = pub->url;
    std::atomic<int> got{0};
    Subscriber sub(url, [&](const uint8_t *, size_t) { ++got; });
    ASSERT_TRUE(pub->send_until(got));
    pub.reset();
    got = 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    pub = std::make_unique<NngPublisher>(url);
    EXPECT_TRUE(pub->send_until(got));
}

// NNG up to 1.5.2 loses its one reaper thread for good when a socket closes
// while a message is arriving on it (its TCP transport resubmits a read on
// the closed pipe; fixed in NNG 1.6.0): from then on no socket in the
// process closes and no dialer reconnects. Events arrive unasked, so every
// client that ended while one was in flight risked it (about one end in 20
// here under a storm of events). Subscribers now end during a storm, and a
// socket with a live connection still closes afterwards.
TEST(Subscriber, EndingWhileEventsArriveLeavesNngAbleToClose) {
    NngPublisher pub("tcp://127.0.0.1:0");
    std::atomic<bool> stop{false};
    std::thread storm([&] {
        while (!stop) {
            pub.send("event");
            std::this_thread::sleep_for(std::chrono::microseconds(200));
        }
    });
    for (int i = 0; i < 200; ++i) {
        std::atomic<int> got{0};
        auto sub = std::make_unique<Subscriber>(pub.url, [&got](const uint8_t *, size_t) { ++got; });
        auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
        while (got == 0 && std::chrono::steady_clock::now() < until)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        ASSERT_GT(got.load(), 0) << "subscriber " << i;
        // A stuck reaper shows as every later end waiting out its bound:
        // stop at the first end that takes a second, not after 200 of them.
        auto t0 = std::chrono::steady_clock::now();
        sub.reset();
        ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1)) << "subscriber " << i;
    }
    stop = true;
    storm.join();
    EXPECT_TRUE(nng_still_closes_sockets());
}

// The server's publisher reaches its own subscribers and NNG SUB sockets,
// over tcp and over ipc, each event whole and in order.
TEST(Events, APublisherReachesSubscribersAndNngSubSockets) {
    char dir[] = "/tmp/th-events-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    for (std::string where : {std::string("tcp://127.0.0.1:0"), "ipc://" + std::string(dir) + "/events"}) {
        SCOPED_TRACE(where);
        th::Publisher pub(where);
        std::mutex mu;
        std::vector<std::string> seen;
        Subscriber sub(pub.url(), [&](const uint8_t *data, size_t size) {
            std::lock_guard lk(mu);
            seen.emplace_back(reinterpret_cast<const char *>(data), size);
        });
        nng_socket nng_sub = NNG_SOCKET_INITIALIZER;
        ASSERT_EQ(nng_sub0_open(&nng_sub), 0);
        nng_socket_set(nng_sub, NNG_OPT_SUB_SUBSCRIBE, "", 0);
        nng_socket_set_ms(nng_sub, NNG_OPT_RECVTIMEO, 100);
        ASSERT_EQ(nng_dial(nng_sub, pub.url().c_str(), nullptr, 0), 0);
        // PUB/SUB drops what is sent before a subscriber is there: "hello"
        // until both have one.
        std::string first;
        for (int i = 0; i < 400 && first.empty(); ++i) {
            pub.publish({'h', 'e', 'l', 'l', 'o'});
            char *buf = nullptr;
            size_t size = 0;
            if (nng_recv(nng_sub, &buf, &size, NNG_FLAG_ALLOC) == 0) {
                first.assign(buf, size);
                nng_free(buf, size);
            }
        }
        ASSERT_EQ(first, "hello");
        for (int i = 0; i < 2000; ++i) {
            std::lock_guard lk(mu);
            if (!seen.empty()) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        {
            std::lock_guard lk(mu);
            seen.clear();
        }
        // Drain what the NNG socket still holds of the hellos.
        for (;;) {
            char *buf = nullptr;
            size_t size = 0;
            if (nng_recv(nng_sub, &buf, &size, NNG_FLAG_ALLOC) != 0) break;
            nng_free(buf, size);
        }
        std::vector<std::string> sent;
        for (int i = 0; i < 50; ++i) {
            sent.push_back("event " + std::to_string(i) + std::string(size_t(i) * 100, 'x'));
            pub.publish(std::vector<uint8_t>(sent.back().begin(), sent.back().end()));
        }
        std::vector<std::string> nng_seen;
        for (size_t i = 0; i < sent.size(); ++i) {
            char *buf = nullptr;
            size_t size = 0;
            if (nng_recv(nng_sub, &buf, &size, NNG_FLAG_ALLOC) != 0) break;
            nng_seen.emplace_back(buf, size);
            nng_free(buf, size);
        }
        EXPECT_EQ(nng_seen, sent);
        for (int i = 0; i < 2000; ++i) {
            std::lock_guard lk(mu);
            if (seen.size() >= sent.size()) break;
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
        std::lock_guard lk(mu);
        EXPECT_EQ(seen, sent);
        EXPECT_EQ(pub.dropped(), 0u);
        nng_close(nng_sub);
    }
    rmdir(dir);
}

// A subscriber that stops reading holds up neither the publisher nor the
// other subscribers: it loses what does not fit its queue. A connection
// that greets as something else is dropped.
TEST(Events, ASubscriberThatDoesNotReadLosesEventsAndHoldsUpNoOne) {
    char dir[] = "/tmp/th-events-XXXXXX";
    ASSERT_NE(mkdtemp(dir), nullptr);
    struct RemoveDir {
        const char *dir;
        ~RemoveDir() { rmdir(dir); }
    } remove_dir{dir};  // after the publisher removed its socket file
    th::Publisher pub("ipc://" + std::string(dir) + "/events");
    std::string why;
    plain::Fd stuck = plain::dial(pub.url(), Deadline(5000), -1, &why);
    ASSERT_TRUE(stuck) << why;
    bool warned = false;
    ASSERT_TRUE(plain::greet(stuck.get(), sp::kSub, sp::kPub, Deadline(5000), -1, pub.url(), "test", &warned));
    plain::Fd other = plain::dial(pub.url(), Deadline(5000), -1, &why);
    ASSERT_TRUE(other) << why;
    uint8_t req[8];
    sp::greeting(sp::kReq, req);
    ASSERT_TRUE(plain::write_all(other.get(), req, sizeof req, nullptr));

    std::atomic<int> got{0};
    Subscriber sub(pub.url(), [&](const uint8_t *, size_t size) {
        if (size == 1024) ++got;
    });
    for (int i = 0; i < 2000 && got == 0; ++i) {
        pub.publish(std::vector<uint8_t>(1024, 'x'));
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    ASSERT_GT(got.load(), 0);
    // 2 MiB in batches the reading subscriber takes: the one that does not
    // read has a socket buffer of a few hundred KiB and a 1 MiB queue.
    int sent = 0;
    for (int batch = 0; batch < 20; ++batch) {
        int before = got;
        for (int i = 0; i < 100; ++i, ++sent) pub.publish(std::vector<uint8_t>(1024, 'x'));
        for (int i = 0; i < 2000 && got < before + 100; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        ASSERT_EQ(got.load(), before + 100) << "batch " << batch;
    }
    EXPECT_GT(pub.dropped(), 0u) << "the subscriber that does not read took " << sent << " events";
    // The other connection, greeted as a request socket, was dropped: the
    // end of its stream follows the publisher's greeting.
    uint8_t greeting[8], more;
    EXPECT_TRUE(plain::read_all(other.get(), greeting, sizeof greeting, Deadline(5000)));
    Deadline deadline(10000);
    EXPECT_TRUE(plain::wait(other.get(), POLLIN, -1, &deadline) == plain::Ready::Yes && ::recv(other.get(), &more, 1, 0) == 0);
}

// What cannot be an event stream is refused or left: a URL scheme it cannot
// dial, and a peer that does not greet as a PUB socket (warned about, tried
// again, and still left at once).
TEST(Subscriber, RefusesWhatIsNotAnEventStream) {
    try {
        Subscriber sub("inproc://events", [](const uint8_t *, size_t) {});
        FAIL() << "inproc:// accepted";
    } catch (const Error &e) {
        EXPECT_EQ(e.code(), TH_ERR_INVALID_ARG);
        EXPECT_NE(std::string(e.what()).find("inproc://events"), std::string::npos) << e.what();
    }
    RpcServer server("tcp://127.0.0.1:0", echo);
    std::atomic<int> got{0};
    auto sub = std::make_unique<Subscriber>(server.url(), [&got](const uint8_t *, size_t) { ++got; });
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    auto stopped = std::async(std::launch::async, [&] { sub.reset(); });
    EXPECT_EQ(stopped.wait_for(std::chrono::seconds(10)), std::future_status::ready);
    stopped.wait();
    EXPECT_EQ(got.load(), 0);
}
