#include "transport/tree.h"

#include <algorithm>

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace mlrun::transport {
namespace {

std::vector<AgentNode> numbered_nodes(int n) {
  std::vector<AgentNode> out;
  for (int i = 0; i < n; ++i) {
    out.push_back({i + 1, "host" + std::to_string(i + 2), "", 0, 2, {}});
  }
  return out;
}

std::vector<int> ranks(const std::vector<TreeNode>& ts) {
  std::vector<int> out;
  for (const auto& t : ts) out.push_back(t.node.node_rank);
  return out;
}

TEST(LaunchTree, AtMostWidthNodesAreAllTheHeads) {
  auto roots = plan_tree(numbered_nodes(4), 4);
  EXPECT_EQ(ranks(roots), (std::vector<int>{1, 2, 3, 4}));
  EXPECT_EQ(tree_depth(roots), 1);
  for (const auto& r : roots) EXPECT_TRUE(r.children.empty());
  EXPECT_EQ(tree_depth(plan_tree({}, 4)), 0);
}

// 24 nodes 4 wide: the head's 4, their 16, and 4 more below the first: three levels, each
// node once.
TEST(LaunchTree, TwentyFourNodesFourWideAreThreeLevels) {
  auto roots = plan_tree(numbered_nodes(24), 4);
  ASSERT_EQ(ranks(roots), (std::vector<int>{1, 2, 3, 4}));
  EXPECT_EQ(tree_depth(roots), 3);
  EXPECT_EQ(ranks(roots[0].children), (std::vector<int>{5, 6, 7, 8}));
  EXPECT_EQ(ranks(roots[3].children), (std::vector<int>{17, 18, 19, 20}));
  EXPECT_EQ(ranks(roots[0].children[0].children), (std::vector<int>{21, 22, 23, 24}));
  EXPECT_TRUE(roots[1].children[0].children.empty());
  std::vector<int> seen;
  for (const auto& r : roots) {
    seen.push_back(r.node.node_rank);
    for (const auto* n : subtree_nodes(r)) seen.push_back(n->node_rank);
  }
  std::sort(seen.begin(), seen.end());
  std::vector<int> all;
  for (int i = 1; i <= 24; ++i) all.push_back(i);
  EXPECT_EQ(seen, all);
}

TEST(LaunchTree, DefaultWidthIsTwoLevelsToOverAThousand) {
  EXPECT_EQ(tree_depth(plan_tree(numbered_nodes(32), 32)), 1);
  EXPECT_EQ(tree_depth(plan_tree(numbered_nodes(33), 32)), 2);
  EXPECT_EQ(tree_depth(plan_tree(numbered_nodes(1056), 32)), 2);
  EXPECT_EQ(tree_depth(plan_tree(numbered_nodes(1057), 32)), 3);
}

TEST(LaunchTree, ALostInteriorNodeNamesEveryNodeBelowIt) {
  auto roots = plan_tree(numbered_nodes(24), 4);
  EXPECT_EQ(describe_subtree(roots[1].children[0]), "");
  EXPECT_EQ(describe_subtree(roots[1]),
            "; the 4 agents below it in the launch tree went with it: host10 (node 9), host11 "
            "(node 10), host12 (node 11), host13 (node 12)");
  // Node 1's subtree: 5-8 and, below node 5, 21-24.
  EXPECT_EQ(subtree_nodes(roots[0]).size(), 8u);
  EXPECT_EQ(subtree_list(roots[0]).rfind("host6 (node 5), host7 (node 6)", 0), 0u);
}

// Near the top of a big tree thousands of agents go with a lost one: the reason names the first
// few and counts the rest, and stays far below the abort's 4 KiB.
TEST(LaunchTree, ALostAgentAboveThousandsNamesAFewAndCountsTheRest) {
  auto roots = plan_tree(numbered_nodes(10000), 32);
  ASSERT_EQ(tree_depth(roots), 3);
  std::string text = describe_subtree(roots[0]);
  std::size_t below = subtree_nodes(roots[0]).size();
  EXPECT_GT(below, 1000u);
  EXPECT_EQ(text.rfind(fmt::format("; the {} agents below it in the launch tree went with it: "
                                   "host34 (node 33), host35 (node 34), ",
                                   below),
                       0),
            0u)
      << text;
  EXPECT_NE(text.find(fmt::format(", and {} more (`--dry-run` shows the whole tree)",
                                  below - kListedBelow)),
            std::string::npos)
      << text;
  EXPECT_LT(text.size(), 1024u);
}

}  // namespace
}  // namespace mlrun::transport
