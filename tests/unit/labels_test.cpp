#include <gtest/gtest.h>

#include "common/error.hpp"
#include "common/labels.hpp"

using namespace th;

TEST(Labels, ParseAndFormat) {
    Labels l = parse_labels("dc=eu,rack=r7,host=node12");
    EXPECT_EQ(l.at("dc"), "eu");
    EXPECT_EQ(l.at("rack"), "r7");
    EXPECT_EQ(l.at("host"), "node12");
    EXPECT_EQ(format_labels(l), "dc=eu,host=node12,rack=r7");
    EXPECT_TRUE(parse_labels("").empty());
    EXPECT_EQ(parse_labels("a=1,,b=2").size(), 2u);
}

TEST(Labels, RejectsMalformed) {
    for (const char *bad : {"dc", "=x", "dc=", "a=1,b"}) {
        try {
            parse_labels(bad);
            ADD_FAILURE() << bad;
        } catch (const Error &e) {
            EXPECT_EQ(e.code(), TH_ERR_INVALID_ARG);
            EXPECT_NE(std::string(e.what()).find("key=value"), std::string::npos);
        }
    }
}
