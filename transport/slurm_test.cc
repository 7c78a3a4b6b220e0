#include <map>

#include <gtest/gtest.h>

#include "launcher/options.h"
#include "transport/slurm.h"
#include "transport/slurm_env.h"

namespace mlrun::transport {
namespace {

using Vars = std::map<std::string, std::string>;

SlurmEnv env_of(const Vars& vars) {
  return read_slurm_env([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

std::string no_dns(const std::string& name) {
  return "addr-of-" + name;
}

const Vars kAllocation = {
    {"SLURM_JOB_ID", "42"}, {"SLURM_JOB_NODELIST", "sn[01-03]"}, {"SLURM_TASKS_PER_NODE", "2(x3)"}};

TEST(SlurmLauncher, AllocationWithoutHostsChoosesSlurm) {
  Options o;
  EXPECT_TRUE(choose_launcher(o, env_of(kAllocation), no_dns).empty());
  EXPECT_EQ(o.launcher, "slurm");
  EXPECT_NE(o.launcher_why.find("allocation 42"), std::string::npos) << o.launcher_why;
}

TEST(SlurmLauncher, HostFlagsWinOverTheAllocation) {
  Options o;
  o.hosts = "a,b";
  EXPECT_TRUE(choose_launcher(o, env_of(kAllocation), no_dns).empty());
  EXPECT_EQ(o.launcher, "ssh");
}

TEST(SlurmLauncher, OutsideAnAllocationIsLocal) {
  Options o;
  EXPECT_TRUE(choose_launcher(o, env_of({}), no_dns).empty());
  EXPECT_EQ(o.launcher, "local");
}

TEST(SlurmLauncher, TorchrunStyleFlagsStayOnThisNode) {
  Options o;
  o.master_addr = "10.0.0.1";
  o.nnodes_min = o.nnodes_max = 2;
  EXPECT_TRUE(choose_launcher(o, env_of(kAllocation), no_dns).empty());
  EXPECT_EQ(o.launcher, "local");
}

TEST(SlurmLauncher, ExplicitChoicesAreChecked) {
  Options slurm;
  slurm.launcher = "slurm";
  auto errors = choose_launcher(slurm, env_of({}), no_dns);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("no SLURM_JOB_ID"), std::string::npos) << errors[0];
  Options ssh;
  ssh.launcher = "ssh";
  errors = choose_launcher(ssh, env_of(kAllocation), no_dns);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("--hostfile or -H"), std::string::npos) << errors[0];
  Options local;
  local.launcher = "local";
  EXPECT_TRUE(choose_launcher(local, env_of(kAllocation), no_dns).empty());
  EXPECT_EQ(local.launcher, "local");
}

Vars step(const std::string& node_id) {
  Vars v = kAllocation;
  v["SLURM_STEP_ID"] = "3";
  v["SLURM_STEP_NODELIST"] = "sn[02-03]";
  v["SLURM_STEP_NUM_NODES"] = "2";
  v["SLURM_NODEID"] = node_id;
  return v;
}

TEST(SlurmPerNode, StepFillsNodesRankAndRendezvous) {
  Options o;
  EXPECT_TRUE(choose_launcher(o, env_of(step("1")), no_dns).empty());
  EXPECT_EQ(o.launcher, "local");
  EXPECT_EQ(o.nnodes_max, 2);
  EXPECT_EQ(o.nnodes_min, 2);
  EXPECT_EQ(o.node_rank, 1);
  EXPECT_EQ(o.master_addr, "addr-of-sn02");  // The step's first node.
  EXPECT_EQ(o.master_port, step_port("42", "3"));
  EXPECT_EQ(o.rdzv_id, "slurm-42.3");
  EXPECT_EQ(o.slurm_step, "42.3");  // What a node that fails before it joins cancels.
}

TEST(SlurmPerNode, ExplicitFlagsWin) {
  Options o;
  o.master_addr = "10.1.1.1";
  o.master_port = 30000;
  o.rdzv_id = "mine";
  EXPECT_TRUE(choose_launcher(o, env_of(step("0")), no_dns).empty());
  EXPECT_EQ(o.master_addr, "10.1.1.1");
  EXPECT_EQ(o.master_port, 30000);
  EXPECT_EQ(o.rdzv_id, "mine");
  EXPECT_EQ(o.nnodes_max, 2);
}

TEST(SlurmPerNode, OneNodeStepIsLocal) {
  Vars v = step("0");
  v["SLURM_STEP_NUM_NODES"] = "1";
  Options o;
  EXPECT_TRUE(choose_launcher(o, env_of(v), no_dns).empty());
  EXPECT_EQ(o.nnodes_max, 1);
  EXPECT_EQ(o.slurm_step, "");  // Nobody waits for it.
}

TEST(SlurmPerNode, BadStepVariablesAreNamed) {
  Vars v = step("7");
  Options o;
  auto errors = choose_launcher(o, env_of(v), no_dns);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0], "SLURM_NODEID=7: not a node of the step");
}

// `srun -n3 mlrun` on two nodes (one task per GPU, as with DeepSpeed): refused on every task,
// naming the variable and the node, on one node too; with --nnodes the user placed them.
TEST(SlurmPerNode, SeveralTasksOnANodeAreRefused) {
  Vars v = step("1");
  v["SLURM_STEP_TASKS_PER_NODE"] = "1,2";
  Options o;
  auto errors = choose_launcher(o, env_of(v), no_dns);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].rfind("SLURM_STEP_TASKS_PER_NODE=1,2: this srun step runs 2 tasks on a "
                            "node (sn03), and mlrun runs once per node",
                            0),
            0u)
      << errors[0];
  EXPECT_NE(errors[0].find("srun --ntasks-per-node=1 mlrun"), std::string::npos) << errors[0];
  Vars one = step("0");
  one["SLURM_STEP_NUM_NODES"] = "1";
  one["SLURM_STEP_NODELIST"] = "sn02";
  one["SLURM_STEP_TASKS_PER_NODE"] = "4";
  Options single;
  errors = choose_launcher(single, env_of(one), no_dns);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("runs 4 tasks on a node (sn02)"), std::string::npos) << errors[0];
  Options placed;
  placed.nnodes_min = placed.nnodes_max = 3;
  EXPECT_TRUE(choose_launcher(placed, env_of(v), no_dns).empty());
  v["SLURM_STEP_TASKS_PER_NODE"] = "1(x2)";
  Options fine;
  EXPECT_TRUE(choose_launcher(fine, env_of(v), no_dns).empty());
  v["SLURM_STEP_TASKS_PER_NODE"] = "2(x0)";
  Options bad;
  errors = choose_launcher(bad, env_of(v), no_dns);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(errors[0].rfind("SLURM_STEP_TASKS_PER_NODE: '2(x0)'", 0), 0u) << errors[0];
}

TEST(SlurmPerNode, PortDependsOnJobAndStep) {
  EXPECT_EQ(step_port("42", "3"), 10000 + 42 * 64 + 3);
  EXPECT_NE(step_port("42", "3"), step_port("42", "4"));
  EXPECT_NE(step_port("42", "3"), step_port("43", "3"));
  EXPECT_LT(step_port("999999999", "63"), 30000);
  EXPECT_GE(step_port("999999999", "63"), 10000);
}

TEST(SlurmHosts, SlotsOnlyWhenTasksWereAskedFor) {
  auto hosts = allocation_hosts(env_of(kAllocation));
  ASSERT_TRUE(hosts.ok());
  ASSERT_EQ(hosts.hosts.size(), 3u);
  EXPECT_EQ(hosts.hosts[2].host, "sn03");
  EXPECT_FALSE(hosts.hosts[0].slots_given);
  Vars v = kAllocation;
  v["SLURM_NTASKS"] = "5";
  v["SLURM_TASKS_PER_NODE"] = "2(x2),1";
  hosts = allocation_hosts(env_of(v));
  ASSERT_TRUE(hosts.ok());
  EXPECT_TRUE(hosts.hosts[0].slots_given);
  EXPECT_EQ(hosts.hosts[1].slots, 2);
  EXPECT_EQ(hosts.hosts[2].slots, 1);
}

TEST(SlurmHosts, MalformedVariablesAreNamed) {
  Vars v = kAllocation;
  v["SLURM_JOB_NODELIST"] = "sn[03-01]";
  auto hosts = allocation_hosts(env_of(v));
  ASSERT_EQ(hosts.errors.size(), 1u);
  EXPECT_EQ(format_error(hosts.errors[0]),
            "SLURM_JOB_NODELIST: 'sn[03-01]': bad range: 03-01 runs backwards");
  v = kAllocation;
  v["SLURM_NTASKS"] = "4";
  v["SLURM_TASKS_PER_NODE"] = "2(x2)";
  hosts = allocation_hosts(env_of(v));
  ASSERT_EQ(hosts.errors.size(), 1u);
  EXPECT_EQ(format_error(hosts.errors[0]),
            "SLURM_TASKS_PER_NODE: 2 counts for the 3 nodes of SLURM_JOB_NODELIST");
}

TEST(SlurmConfig, VersionAndKillWait) {
  auto c = parse_slurm_config(
      "Configuration data as of 2026-12-01T07:00:00\n"
      "KillOnBadExit           = 0\n"
      "KillWait                = 30 sec\n"
      "SLURM_VERSION           = 22.05.8\n");
  EXPECT_EQ(c.version, "22.05.8");
  EXPECT_EQ(c.kill_wait, std::chrono::seconds(30));
}

TEST(SlurmConfig, RefusesTheVersionsThatBreakDaemonSteps) {
  for (const char* v : {"20.11.0", "20.11.1", "20.11.2"}) {
    EXPECT_NE(refuse_slurm_version(v).find("Open MPI issue 8378"), std::string::npos) << v;
  }
  for (const char* v : {"20.11.3", "22.05.8", "20.02.7", "23.11.1"}) {
    EXPECT_EQ(refuse_slurm_version(v), "") << v;
  }
}

TEST(SlurmConfig, GraceEndsBeforeKillWait) {
  using std::chrono::milliseconds;
  using std::chrono::seconds;
  EXPECT_EQ(grace_within_kill_wait(milliseconds(5000), seconds(30)), milliseconds(5000));
  EXPECT_EQ(grace_within_kill_wait(milliseconds(60000), seconds(30)), milliseconds(28000));
  EXPECT_EQ(grace_within_kill_wait(milliseconds(5000), seconds(5)), milliseconds(3000));
  EXPECT_EQ(grace_within_kill_wait(milliseconds(5000), seconds(2)), milliseconds(1000));
  EXPECT_EQ(grace_within_kill_wait(milliseconds(5000), seconds(0)), milliseconds(5000));
}

TEST(SlurmTransport, SrunOptionsAreExplicitAndCarryNoSecret) {
  std::vector<AgentNode> nodes = {{0, "sn01"}, {1, "sn02"}};
  auto argv = srun_argv("/usr/bin/srun", nodes, {"/x/mlrun", "agent"});
  std::vector<std::string> want = {"/usr/bin/srun",
                                   "--nodes=2",
                                   "--ntasks=2",
                                   "--ntasks-per-node=1",
                                   "--nodelist=sn01,sn02",
                                   "--overlap",
                                   "--kill-on-bad-exit=1",
                                   "--mpi=none",
                                   "--cpu-bind=none",
                                   "--input=none",
                                   "--export=ALL",
                                   "/x/mlrun",
                                   "agent"};
  EXPECT_EQ(argv, want);
  for (const auto& a : argv) EXPECT_EQ(a.find("gpu"), std::string::npos) << a;
}

TEST(SlurmTransport, AgentDescriptionHasNoToken) {
  AgentJob job;
  job.token = "secret-token";
  job.port = 1234;
  std::vector<AgentNode> nodes = {{0, "sn01", "", 0, 0}, {1, "sn02", "", 0, 2}};
  std::string text = encode_agent_job(every_node_job(job, nodes));
  EXPECT_EQ(text.find("secret-token"), std::string::npos);
  AgentJob back = decode_agent_job(text);
  EXPECT_EQ(back.token, "");
  EXPECT_EQ(back.node_rank, -1);
  ASSERT_EQ(back.nodes.size(), 2u);
  EXPECT_EQ(back.nodes[1].host, "sn02");
  EXPECT_EQ(back.nodes[1].nproc, 2);
  EXPECT_EQ(back.port, 1234);
}

}  // namespace
}  // namespace mlrun::transport
