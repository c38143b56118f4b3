// The UCX settings tensorhub applies to its contexts: its own values where
// the user set nothing, the user's where they did.
#include <cstdio>
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>

#include "scoped_env.hpp"
#include "transport/ucx_env.hpp"

namespace th {
namespace {

// The value of UCX_<name> in a context configuration, as UCX prints it.
std::string value_of(ucp_config_t *config, const std::string &name) {
    char *text = nullptr;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    ucp_config_print(config, f, nullptr, UCS_CONFIG_PRINT_CONFIG);
    std::fclose(f);
    std::string all(text, len);
    std::free(text);
    // Context settings print as UCX_<name>=, transport settings given to
    // the context as <name>=.
    for (std::string key : {"UCX_" + name + "=", name + "="}) {
        size_t at = all.find("\n" + key);
        if (at == std::string::npos) continue;
        at += 1 + key.size();
        return all.substr(at, all.find('\n', at) - at);
    }
    return "(not printed)";
}

// Applies the defaults to a configuration read with UCX_<name> set to
// `user` in the environment (unset when null); returns the value it ends with.
std::string applied(const std::string &name, const char *user) {
    th_support::ScopedEnv as_the_user("UCX_" + name, user);
    ucp_config_t *config = nullptr;
    EXPECT_EQ(ucp_config_read(nullptr, nullptr, &config), UCS_OK);
    const char *refused = nullptr;
    EXPECT_TRUE(apply_ucx_defaults(config, &refused)) << (refused ? refused : "");
    std::string v = value_of(config, name);
    ucp_config_release(config);
    return v;
}

// Endpoints whose other side was closed are found out within a second
// (ucx_env.hpp), with a UCX that does not abort when one fails then.
TEST(UcxEnv, KeepaliveRunsEverySecondUnlessTheUserSaysOtherwise) {
    if (ucx_aborts_on_a_failed_wireup_reply()) GTEST_SKIP() << "UCX before 1.14: the setting is not applied";
    if (!ucx_one_sided_reads()) GTEST_SKIP() << "UCX before 1.19: set in the environment, not in the configuration";
    EXPECT_EQ(applied("KEEPALIVE_INTERVAL", nullptr), "1000000.00us");
    EXPECT_EQ(applied("KEEPALIVE_INTERVAL", "20s"), "20000000.00us");
}

TEST(UcxEnv, CudaBuffersAreRegisteredAsGivenUnlessTheUserSaysOtherwise) {
    if (!ucx_one_sided_reads()) GTEST_SKIP() << "UCX before 1.19: the setting is not applied";
    EXPECT_EQ(applied("MEMTYPE_REG_WHOLE_ALLOC_TYPES", nullptr), "");
    EXPECT_EQ(applied("MEMTYPE_REG_WHOLE_ALLOC_TYPES", "cuda"), "cuda");
}

TEST(UcxEnv, CudaIpcReadsOneSidedUnlessTheUserSaysOtherwise) {
    if (!ucx_one_sided_reads()) GTEST_SKIP() << "UCX before 1.19: the setting is not applied";
    std::string v = applied("CUDA_IPC_ENABLE_GET_ZCOPY", nullptr);
    if (v == "(not printed)") GTEST_SKIP() << "this UCX has no cuda_ipc transport here (no CUDA driver)";
    EXPECT_EQ(v, "y");
    // The user's value stays in the environment, where cuda_ipc reads it.
    EXPECT_EQ(applied("CUDA_IPC_ENABLE_GET_ZCOPY", "n"), "(not printed)");
}

TEST(UcxEnv, ASettingOfATransportThisUcxLacksIsSkipped) {
    ucp_config_t *config = nullptr;
    ASSERT_EQ(ucp_config_read(nullptr, nullptr, &config), UCS_OK);
    const char *refused = nullptr;
    EXPECT_TRUE(apply_ucx_defaults(config, &refused)) << "refused " << (refused ? refused : "");
    ucp_config_release(config);
}

}  // namespace
}  // namespace th
