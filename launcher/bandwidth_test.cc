#include "launcher/bandwidth.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace mlrun {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(ParseByteSize, NcclTestsSpellings) {
  EXPECT_EQ(parse_byte_size("8"), 8u);
  EXPECT_EQ(parse_byte_size("64K"), 64u << 10);
  EXPECT_EQ(parse_byte_size("128M"), 128u << 20);
  EXPECT_EQ(parse_byte_size("1G"), 1u << 30);
  EXPECT_FALSE(parse_byte_size(""));
  EXPECT_FALSE(parse_byte_size("0"));
  EXPECT_FALSE(parse_byte_size("M"));
  EXPECT_FALSE(parse_byte_size("-8"));
  EXPECT_FALSE(parse_byte_size("8X"));
}

TEST(SweepSizes, DoublingFromMinToMaxInWholeFloats) {
  SweepOptions o;
  EXPECT_EQ(sweep_sizes(o).size(), 25u);  // 8 B .. 128 MiB, as all_reduce_perf -b 8 -e 128M.
  EXPECT_EQ(sweep_sizes(o).front(), 8u);
  EXPECT_EQ(sweep_sizes(o).back(), 128u << 20);
  o.min_bytes = 2;
  o.max_bytes = 64;
  o.factor = 3;
  EXPECT_THAT(sweep_sizes(o), ElementsAre(4u, 4u, 16u, 52u));  // 2, 6, 18, 54 rounded to floats
}

TEST(SweepFlags, ReproduceTheOptions) {
  SweepOptions o;
  o.max_bytes = 1 << 20;
  o.iters = 3;
  std::vector<std::string> flags = sweep_flags(o);
  SweepOptions back;
  std::vector<std::string> errors;
  for (std::size_t i = 0; i < flags.size(); ++i) {
    ASSERT_TRUE(parse_sweep_flag(flags, i, back, errors)) << flags[i];
  }
  EXPECT_TRUE(errors.empty());
  EXPECT_EQ(back.max_bytes, o.max_bytes);
  EXPECT_EQ(back.iters, 3);
  EXPECT_EQ(back.warmup, o.warmup);
}

TEST(BusBandwidth, AllReduceFactor) {
  EXPECT_DOUBLE_EQ(allreduce_bus_bandwidth(10, 2), 10);
  EXPECT_DOUBLE_EQ(allreduce_bus_bandwidth(10, 4), 15);
  EXPECT_DOUBLE_EQ(allreduce_bus_bandwidth(10, 1), 0);
}

TEST(SweepTable, RowsLikeAllReducePerf) {
  EXPECT_THAT(sweep_table_header(), HasSubstr("size         count      type   redop"));
  SweepRow r{1048576, 1234.5, 0.85, 1.27, 0};
  EXPECT_EQ(sweep_table_row(r),
            "     1048576        262144     float     sum    1234.5    0.85    1.27       0\n");
}

TEST(LinkVerdict, FarBelowTheLinkWarns) {
  bool warn = false;
  std::vector<RankLink> links = {
      {"host1", "eth0", 10000}, {"host1", "eth0", 10000}, {"host2", "eth0", 25000}};
  auto lines = link_verdict(0.2, 1 << 20, 1 << 20, false, links, &warn);
  EXPECT_TRUE(warn);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "# links: host1 eth0 10 Gb/s; host2 eth0 25 Gb/s");
  EXPECT_THAT(lines[1],
              HasSubstr("WARNING: peak bus bandwidth 0.200 GB/s (at 1 MiB) is 16.0% of "
                        "the slowest chosen link, eth0 on host1 at 10 Gb/s (1.250 GB/s)"));
  EXPECT_THAT(lines[2], HasSubstr("the sweep stopped at 1 MiB"));
}

TEST(LinkVerdict, NearTheLinkIsFine) {
  bool warn = true;
  auto lines = link_verdict(1.0, 128u << 20, 128u << 20, false,
                            {{"a", "eth0", 10000}, {"b", "ib0", 10000}}, &warn);
  EXPECT_FALSE(warn);
  EXPECT_THAT(lines.back(), HasSubstr("is 80.0% of the slowest chosen link"));
}

TEST(LinkVerdict, UnknownSpeedIsSaidNotWarned) {
  bool warn = true;
  auto lines = link_verdict(0.01, 8, 8, false, {{"a", "eth0", 10000}, {"b", "veth1", -1}}, &warn);
  EXPECT_FALSE(warn);
  EXPECT_THAT(lines.back(), HasSubstr("link speed unknown: veth1 on b reports no speed"));
  lines = link_verdict(0.01, 8, 8, false, {{"a", "", -1}}, &warn);
  EXPECT_FALSE(warn);
  EXPECT_THAT(lines.back(), HasSubstr("GLOO_SOCKET_IFNAME is not set"));
}

TEST(LinkVerdict, OneHostCrossesNoLink) {
  bool warn = true;
  auto lines = link_verdict(0.01, 8, 8, true, {{"a", "eth0", 100000}}, &warn);
  EXPECT_FALSE(warn);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(lines[0], HasSubstr("crossed no network link"));
}

}  // namespace
}  // namespace mlrun
