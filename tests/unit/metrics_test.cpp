#include <gtest/gtest.h>

#include "server/metrics.hpp"

using namespace th;

TEST(Metrics, LabelValuesAreEscapedAsTheTextFormatAsks) {
    EXPECT_EQ(prometheus_labels({{"model", "a\"b\\c\nd"}, {"kind", "x"}}), R"({model="a\"b\\c\nd",kind="x"})");
    EXPECT_EQ(prometheus_labels({}), "{}");
}

TEST(Metrics, HistogramBucketsAreCumulative) {
    Histogram h({0.1, 1});
    for (double v : {0.05, 0.1, 0.5, 2.0}) h.observe(v);
    std::string out;
    h.render(out, "x_seconds", "X.");
    EXPECT_EQ(out,
              "# HELP x_seconds X.\n# TYPE x_seconds histogram\n"
              "x_seconds_bucket{le=\"0.1\"} 2\nx_seconds_bucket{le=\"1\"} 3\nx_seconds_bucket{le=\"+Inf\"} 4\n"
              "x_seconds_sum 2.65\nx_seconds_count 4\n");
}
