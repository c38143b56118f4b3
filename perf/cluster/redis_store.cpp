// tensorhub-cluster-redis: the storage baseline of the cluster benchmark
// (push-then-pull through a store). The trainer pushes S bytes to a Redis
// server as chunk-sized values and then sets a "done" key; readers that are
// ready poll for that key and pull every chunk. Speaks the line protocol of
// node_io.hpp.
//
//   tensorhub-cluster-redis --role push|pull --host IP [--port 6379] --bytes S
//       [--tensors T] [--chunk-mb 8] [--key PREFIX] [--ready-offset SECONDS]
#include <hiredis/hiredis.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "args.hpp"
#include "bench_util.hpp"
#include "node_io.hpp"

using namespace th_cluster;
using th_bench::fail;
using th_bench::str;

namespace {

struct Options {
    Payload payload{0, 4};
    uint64_t chunk_bytes = 8ull << 20;
    std::string host, key;
    int port = 6379;
    double ready_offset = 0;
};

using Context = std::unique_ptr<redisContext, decltype(&redisFree)>;
using Reply = std::unique_ptr<redisReply, decltype(&freeReplyObject)>;

Context connect(const Options &o) {
    timeval tv{30, 0};
    Context c(redisConnectWithTimeout(o.host.c_str(), o.port, tv), redisFree);
    if (!c || c->err) fail("cannot connect to redis at ", o.host, ":", o.port, ": ", c ? c->errstr : "out of memory");
    redisSetTimeout(c.get(), tv);  // no command may hang forever
    return c;
}

Reply command(redisContext *c, const char *what, const char *fmt, const std::string &key, const void *p = nullptr,
              size_t n = 0) {
    void *r = p ? redisCommand(c, fmt, key.c_str(), p, n) : redisCommand(c, fmt, key.c_str());
    if (r == nullptr) fail("redis ", what, " ", key, ": ", c->errstr);
    Reply reply(static_cast<redisReply *>(r), freeReplyObject);
    if (reply->type == REDIS_REPLY_ERROR) fail("redis ", what, " ", key, ": ", reply->str);
    return reply;
}

std::string chunk_key(const Options &o, uint64_t i) { return o.key + ":" + std::to_string(i); }

int run_push(const Options &o) {
    Context c = connect(o);
    th_bench::PageBuffer buffer(o.payload.bytes);
    o.payload.fill(buffer.data());
    double t0 = wait_for_start();
    sleep_until(t0);
    double start = wall_now();
    for (uint64_t off = 0, i = 0; off < o.payload.bytes; off += o.chunk_bytes, ++i)
        command(c.get(), "SET", "SET %s %b", chunk_key(o, i), buffer.data() + off,
                std::min(o.chunk_bytes, o.payload.bytes - off));
    command(c.get(), "SET", "SET %s 1", o.key + ":done");
    double done = wall_now();
    emit(str("{\"role\":\"push\",\"start\":", fixed(start), ",\"done\":", fixed(done), "}"));
    serve_until_quit([] { return true; });
    return 0;
}

int run_pull(const Options &o) {
    Context c = connect(o);
    th_bench::PageBuffer buffer(o.payload.bytes);
    buffer.clear();
    double t0 = wait_for_start();
    sleep_until(t0 + o.ready_offset);
    double ready = wall_now();
    // The store cannot tell a reader when the version is complete: poll.
    while (command(c.get(), "EXISTS", "EXISTS %s", o.key + ":done")->integer == 0) {
        if (wall_now() - ready > 600) fail("no complete version in the store after 600 s");
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    for (uint64_t off = 0, i = 0; off < o.payload.bytes; off += o.chunk_bytes, ++i) {
        Reply r = command(c.get(), "GET", "GET %s", chunk_key(o, i));
        uint64_t want = std::min(o.chunk_bytes, o.payload.bytes - off);
        if (r->type != REDIS_REPLY_STRING || r->len != want) fail("chunk ", i, " is missing or has the wrong size");
        std::memcpy(buffer.data() + off, r->str, want);
    }
    double done = wall_now();
    emit(str("{\"role\":\"pull\",\"ready\":", fixed(ready), ",\"done\":", fixed(done), ",\"bytes\":", o.payload.bytes,
             "}"));
    serve_until_quit([&] { return o.payload.check(buffer.data()); });
    return 0;
}

}  // namespace

int main(int argc, char **argv) {
    try {
        th_support::Args args(argc, argv);
        auto bad = args.unknown({"role", "host", "port", "bytes", "tensors", "chunk-mb", "key", "ready-offset"});
        if (!bad.empty()) fail("unknown option --", bad[0]);
        Options o;
        o.payload = payload_option(args);
        o.chunk_bytes = args.get_u64("chunk-mb", 8) << 20;
        if (o.chunk_bytes == 0) fail("--chunk-mb must be positive");
        o.host = args.get("host");
        o.port = static_cast<int>(args.get_u64("port", 6379));
        o.key = args.get("key", "weights");
        o.ready_offset = args.get_double("ready-offset", 0);
        std::string role = args.get("role");
        if (role == "push") return run_push(o);
        if (role == "pull") return run_pull(o);
        fail("unknown --role '", role, "' (push, pull)");
    } catch (const std::exception &e) {
        std::fprintf(stderr, "tensorhub-cluster-redis: %s\n", e.what());
        return 1;
    }
}
