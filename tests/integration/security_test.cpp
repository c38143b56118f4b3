// The cluster token: peers without it are refused, learn nothing (no rkeys),
// and change nothing; peers with it work as usual.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>

#include "harness.hpp"

using namespace th_test;

namespace {

th_server *server_with_token(const char *token) {
    th_server_config sc;
    th_server_config_init(&sc, sizeof sc);
    sc.token = token;
    th_server *s = nullptr;
    EXPECT_EQ(th_server_create(&s, &sc), TH_OK) << th_last_error();
    return s;
}

th_status connect_with_token(const std::string &url, const char *token, th_client **out) {
    th_client_config cc;
    th_client_config_init(&cc, sizeof cc);
    cc.server_url = url.c_str();
    cc.token = token;
    cc.timeout_ms = 2000;
    return th_client_create(out, &cc);
}

}  // namespace

TEST(Security, OnlyPeersWithTheClusterTokenAreServed) {
    unsetenv("TENSORHUB_TOKEN");
    th_server *server = server_with_token("correct horse battery staple");
    std::string url = th_server_url(server);

    th_client *pub = nullptr, *reader = nullptr, *intruder = nullptr;
    ASSERT_EQ(connect_with_token(url, "correct horse battery staple", &pub), TH_OK) << th_last_error();
    Shard w(2, 128 << 10, 1);
    th_replica *r = nullptr;
    ASSERT_EQ(publish(pub, "m", 1, 0, 1, w, &r), TH_OK) << th_last_error();

    // Without the token, or with another one: refused, with a clear error.
    EXPECT_ERROR(connect_with_token(url, nullptr, &intruder), TH_ERR_AUTH, "authentication");
    EXPECT_EQ(intruder, nullptr);
    EXPECT_ERROR(connect_with_token(url, "guess", &intruder), TH_ERR_AUTH, "cluster token");
    char *json = nullptr;
    EXPECT_ERROR(th_server_status_json(url.c_str(), 2000, &json), TH_ERR_AUTH, "authentication");
    EXPECT_EQ(json, nullptr);

    // The token from the environment works for programs like the CLI.
    setenv("TENSORHUB_TOKEN", "correct horse battery staple", 1);
    ASSERT_EQ(th_server_status_json(url.c_str(), 2000, &json), TH_OK) << th_last_error();
    auto s = nlohmann::json::parse(json);
    th_free(json);
    EXPECT_EQ(s["workers"].size(), 1u);  // the refused peers left no trace
    unsetenv("TENSORHUB_TOKEN");

    // Peers with the token work as usual.
    ASSERT_EQ(connect_with_token(url, "correct horse battery staple", &reader), TH_OK) << th_last_error();
    Shard got(2, 128 << 10);
    ASSERT_EQ(fetch(reader, "m", TH_LATEST, 0, got), TH_OK) << th_last_error();
    EXPECT_EQ(got.data, w.data);

    th_replica_release(r);
    th_client_destroy(reader);
    th_client_destroy(pub);
    th_server_destroy(server);
}

TEST(Security, AClientWithATokenRefusesAServerWithout) {
    unsetenv("TENSORHUB_TOKEN");
    th_server *open_server = server_with_token(nullptr);
    th_client *c = nullptr;
    // The server's unsigned replies cannot be trusted: nothing from it is read.
    EXPECT_ERROR(connect_with_token(th_server_url(open_server), "secret", &c), TH_ERR_AUTH, "authentication");
    th_server_destroy(open_server);
}

TEST(Security, GarbageOnTheServerPortGetsAnErrorAndTheServerKeepsServing) {
    unsetenv("TENSORHUB_TOKEN");
    th_server *server = server_with_token(nullptr);
    std::string url = th_server_url(server);
    nng_socket req;
    ASSERT_EQ(nng_req0_open(&req), 0);
    nng_socket_set_ms(req, NNG_OPT_RECVTIMEO, 5000);
    ASSERT_EQ(nng_dial(req, url.c_str(), nullptr, 0), 0);
    const char *junk[] = {"", "x", "definitely not a flatbuffer, but long enough to look like one....."};
    for (const char *j : junk) {
        ASSERT_EQ(nng_send(req, const_cast<char *>(j), std::strlen(j) + 1, 0), 0);
        char *buf = nullptr;
        size_t n = 0;
        ASSERT_EQ(nng_recv(req, &buf, &n, NNG_FLAG_ALLOC), 0);  // an answer, not silence
        EXPECT_GT(n, 8u);
        nng_free(buf, n);
    }
    nng_close(req);
    th_client *c = nullptr;
    ASSERT_EQ(connect_with_token(url, nullptr, &c), TH_OK) << th_last_error();
    th_client_destroy(c);
    th_server_destroy(server);
}
