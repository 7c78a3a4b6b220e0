#include "doctor/bandwidth.h"
#include "doctor/sweep.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace mlrun::doctor {
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
  FlagSyntax syntax{[](const std::string& arg) { return "unknown " + arg; },
                    [](const std::string& f, const Flag&) { return "no value " + f; },
                    [](const std::string& f, const Flag&) { return "a value " + f; }};
  EXPECT_EQ(parse_flags(sweep_flag_table(back, errors), flags, syntax, errors), flags.size());
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

TEST(SweepRow, BandwidthsFromTheSlowestMeanTime) {
  SweepRow r = make_sweep_row(1000000, 1000.0, 4, 2);
  EXPECT_DOUBLE_EQ(r.algbw, 1.0);  // 1e6 B in 1 ms: 1 GB/s.
  EXPECT_DOUBLE_EQ(r.busbw, 1.5);  // x 2(4-1)/4.
  EXPECT_EQ(r.wrong, 2);
  EXPECT_DOUBLE_EQ(make_sweep_row(8, 0, 2, 0).algbw, 0);
  EXPECT_DOUBLE_EQ(make_sweep_row(1 << 20, 10.0, 1, 0).busbw, 0);  // One rank moves nothing.
}

TEST(SweepValues, ExpectedIsTheSumOfEveryRanksInput) {
  for (int world = 1; world <= 64; world *= 2) {
    for (std::size_t i = 0; i < 40; ++i) {
      float sum = 0;
      for (int r = 0; r < world; ++r) sum += sweep_input(r, i);
      EXPECT_EQ(sum, sweep_expected(world, i)) << world << " ranks, element " << i;
    }
  }
}

TEST(SweepGpu, OneGpuPerLocalRank) {
  std::string why;
  EXPECT_EQ(sweep_gpu(0, 1, &why), 0);
  EXPECT_EQ(sweep_gpu(3, 8, &why), 3);
  EXPECT_TRUE(why.empty());
  EXPECT_EQ(sweep_gpu(2, 2, &why), std::nullopt);
  EXPECT_THAT(why, HasSubstr("LOCAL_RANK 2 has no GPU of its own: this process sees 2 GPUs"));
  EXPECT_THAT(why, HasSubstr("run at most 2 ranks per node"));
  EXPECT_EQ(sweep_gpu(0, 0, &why), std::nullopt);
}

TEST(LinkVerdict, NcclNamesItsVariableAndItsOnHostPath) {
  bool warn = true;
  auto lines = link_verdict(0.01, 8, 8, true, {{"a", "eth0", 100000}}, &warn, "nccl");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_THAT(lines[0], HasSubstr("NVLink, PCIe or shared memory"));
  lines = link_verdict(0.01, 8, 8, false, {{"a", "", -1}}, &warn, "nccl");
  EXPECT_THAT(lines.back(), HasSubstr("NCCL_SOCKET_IFNAME is not set"));
  EXPECT_STREQ(sweep_iface_variable("nccl"), "NCCL_SOCKET_IFNAME");
  EXPECT_STREQ(sweep_iface_variable("gloo"), "GLOO_SOCKET_IFNAME");
}

// The NCCL path needs no CUDA to build; where a library is missing it says which, and what was
// tried, instead of failing later.
TEST(NcclSweepLibraries, MissingLibraryIsNamed) {
  NcclLibraryNames names;
  names.cudart = {"libmlrun-test-absent-cudart.so"};
  try {
    load_nccl_libraries(names);
    FAIL() << "loaded an absent library";
  } catch (const SweepError& e) {
    EXPECT_THAT(e.what(), HasSubstr("NCCL sweep: cannot load the CUDA runtime (libcudart) "
                                    "(tried libmlrun-test-absent-cudart.so): "));
  }
  names.cudart = {"libc.so.6"};  // Loads, but is not the CUDA runtime.
  try {
    load_nccl_libraries(names);
    FAIL() << "libc taken for the CUDA runtime";
  } catch (const SweepError& e) {
    EXPECT_THAT(e.what(), HasSubstr("cudaGetDeviceCount is not in the loaded library"));
  }
}

}  // namespace
}  // namespace mlrun::doctor
