#include "launcher/head.h"

#include <gtest/gtest.h>

namespace mlrun {
namespace {

Options hosts(std::string spec) {
  Options o;
  o.hosts = std::move(spec);
  return o;
}

auto none_local = [](const std::string&) { return false; };

TEST(PlanHosts, SlotsGiveWorkersInHostOrder) {
  auto p = plan_hosts(hosts("a:2,b,c:3"), [](const std::string& h) { return h == "b"; });
  ASSERT_TRUE(p.errors.empty());
  ASSERT_EQ(p.nodes.size(), 3u);
  EXPECT_EQ(p.nodes[0].nproc, 2);
  EXPECT_EQ(p.nodes[1].nproc, 1);
  EXPECT_TRUE(p.nodes[1].local);
  EXPECT_EQ(p.nodes[2].nproc, 3);
}

TEST(PlanHosts, NprocPerNodeOverridesSlots) {
  Options o = hosts("a:2,b:8");
  o.nproc_per_node = "4";
  o.nproc_given = true;
  auto p = plan_hosts(o, none_local);
  ASSERT_TRUE(p.errors.empty());
  EXPECT_EQ(p.nodes[0].nproc, 4);
  EXPECT_EQ(p.nodes[1].nproc, 4);
}

TEST(PlanHosts, NpFillsHostByHostAndDropsTheRest) {
  Options o = hosts("a:2,b:2,c:2");
  o.np = 3;
  auto p = plan_hosts(o, none_local);
  ASSERT_TRUE(p.errors.empty());
  ASSERT_EQ(p.nodes.size(), 2u);
  EXPECT_EQ(p.nodes[0].nproc, 2);
  EXPECT_EQ(p.nodes[1].nproc, 1);
}

TEST(PlanHosts, Errors) {
  Options o = hosts("a:2");
  o.np = 3;
  EXPECT_EQ(plan_hosts(o, none_local).errors,
            std::vector<std::string>{"-np 3: the hosts have only 2 slots"});
  o = hosts("a:x");
  EXPECT_EQ(plan_hosts(o, none_local).errors.size(), 1u);
  o = hosts("a,b");
  o.hostfile = "f";
  EXPECT_EQ(plan_hosts(o, none_local).errors.size(), 1u);
  auto all_local = [](const std::string&) { return true; };
  EXPECT_EQ(plan_hosts(hosts("localhost,127.0.0.1"), all_local).errors.size(), 1u);
}

TEST(PlanHosts, IncludeKeepsChosenSlots) {
  Options o = hosts("a:4,b:4");
  o.include = "b:0,1";
  auto p = plan_hosts(o, none_local);
  ASSERT_TRUE(p.errors.empty());
  ASSERT_EQ(p.nodes.size(), 1u);
  EXPECT_EQ(p.nodes[0].host.host, "b");
  EXPECT_EQ(p.nodes[0].nproc, 2);
}

TEST(IsLocalHost, KnowsThisMachine) {
  EXPECT_TRUE(is_local_host("localhost"));
  EXPECT_TRUE(is_local_host("127.0.0.1"));
  EXPECT_FALSE(is_local_host("192.0.2.77"));
}

}  // namespace
}  // namespace mlrun
