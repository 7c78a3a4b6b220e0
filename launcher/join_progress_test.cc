#include "launcher/join_progress.h"

#include <vector>

#include <gtest/gtest.h>

namespace mlrun {
namespace {

// The lines the head logs while n nodes of w ranks each join attempt g.
std::vector<std::string> said(JoinProgress& p, int g, std::uint32_t n, std::uint64_t w) {
  std::vector<std::string> lines;
  std::string group = "mlrun/join/g" + std::to_string(g) + "/nodes";
  for (std::uint32_t i = 1; i <= n; ++i) {
    if (auto line = p.on_join(group, i, n, i * w)) lines.push_back(*line);
  }
  return lines;
}

TEST(JoinProgress, FirstEveryTenthAndLast) {
  JoinProgress p(200, std::chrono::steady_clock::now());
  auto lines = said(p, 0, 100, 2);
  ASSERT_EQ(lines.size(), 11u);  // the first, 9 tenths between, the last
  EXPECT_EQ(lines.front().rfind("ranks joined 2/200: 1/100 nodes after ", 0), 0u) << lines.front();
  EXPECT_EQ(lines[1].rfind("ranks joined 20/200: 10/100 nodes", 0), 0u) << lines[1];
  EXPECT_EQ(lines.back().rfind("ranks joined 200/200: 100/100 nodes", 0), 0u) << lines.back();
}

TEST(JoinProgress, EveryNodeOfASmallJob) {
  JoinProgress p(6, std::chrono::steady_clock::now());
  auto lines = said(p, 0, 3, 2);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[1].rfind("ranks joined 4/6: 2/3 nodes", 0), 0u) << lines[1];
}

TEST(JoinProgress, AWorldTheHeadDoesNotKnowIsCountedByNodesAndTotalledAtTheLast) {
  // Under Slurm each node counts its own GPUs: the head's plan has no world size.
  JoinProgress p(0, std::chrono::steady_clock::now());
  auto lines = said(p, 0, 20, 4);
  ASSERT_EQ(lines.size(), 11u) << lines.size();  // the first, 9 tenths of the nodes, the last
  EXPECT_EQ(lines.front().rfind("ranks joined 4 so far: 1/20 nodes after ", 0), 0u)
      << lines.front();
  EXPECT_EQ(lines[1].rfind("ranks joined 8 so far: 2/20 nodes", 0), 0u) << lines[1];
  EXPECT_EQ(lines.back().rfind("ranks joined 80: 20/20 nodes", 0), 0u) << lines.back();
}

TEST(JoinProgress, EachAttemptCountsAfreshAndOtherGroupsAreNotCounted) {
  JoinProgress p(4, std::chrono::steady_clock::now());
  EXPECT_FALSE(p.on_join("mlrun/join/g0/trainer", 1, 4, 1));
  EXPECT_FALSE(p.on_join("job/nodes", 1, 4, 1));
  EXPECT_EQ(said(p, 0, 2, 2).size(), 2u);
  auto again = said(p, 1, 2, 2);
  ASSERT_EQ(again.size(), 2u);
  EXPECT_EQ(again[0].rfind("ranks joined 2/4 (attempt 1): 1/2 nodes", 0), 0u) << again[0];
}

}  // namespace
}  // namespace mlrun
