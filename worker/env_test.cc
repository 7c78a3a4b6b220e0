#include "worker/env.h"

#include <gtest/gtest.h>

namespace mlrun {
namespace {

std::string get(const std::vector<std::string>& env, const std::string& name) {
  for (const auto& e : env) {
    if (e.rfind(name + "=", 0) == 0) return e.substr(name.size() + 1);
  }
  return "<unset>";
}

GroupEnv two_nodes() {
  GroupEnv g;
  g.node_rank = 1;
  g.nnodes = 2;
  g.rank_offset = 4;
  g.local_world_size = 4;
  g.world_size = 8;
  g.master_addr = "10.0.0.1";
  g.master_port = 29500;
  g.restart_count = 2;
  g.max_restarts = 3;
  g.job_id = "job1";
  g.backend = "gloo";
  return g;
}

TEST(WorkerEnv, AgentStoreMakesEveryWorkerAStoreClient) {
  GroupEnv g = two_nodes();
  g.agent_store = true;
  auto env = worker_environment(Environment(), g, 0, "/e");
  EXPECT_EQ(get(env, "TORCHELASTIC_USE_AGENT_STORE"), "True");
}

TEST(WorkerEnv, HasTorchrunVariablesWithTorchrunValues) {
  auto env = worker_environment(Environment({"PATH=/bin", "HOME=/root"}), two_nodes(), 2, "/e");
  EXPECT_EQ(get(env, "RANK"), "6");
  EXPECT_EQ(get(env, "LOCAL_RANK"), "2");
  EXPECT_EQ(get(env, "WORLD_SIZE"), "8");
  EXPECT_EQ(get(env, "LOCAL_WORLD_SIZE"), "4");
  EXPECT_EQ(get(env, "GROUP_RANK"), "1");
  EXPECT_EQ(get(env, "GROUP_WORLD_SIZE"), "2");
  EXPECT_EQ(get(env, "ROLE_RANK"), "6");
  EXPECT_EQ(get(env, "ROLE_WORLD_SIZE"), "8");
  EXPECT_EQ(get(env, "ROLE_NAME"), "default");
  EXPECT_EQ(get(env, "MASTER_ADDR"), "10.0.0.1");
  EXPECT_EQ(get(env, "MASTER_PORT"), "29500");
  EXPECT_EQ(get(env, "TORCHELASTIC_RESTART_COUNT"), "2");
  EXPECT_EQ(get(env, "TORCHELASTIC_MAX_RESTARTS"), "3");
  EXPECT_EQ(get(env, "TORCHELASTIC_RUN_ID"), "none");
  EXPECT_EQ(get(env, "TORCHELASTIC_USE_AGENT_STORE"), "False");
  EXPECT_EQ(get(env, "TORCHELASTIC_ERROR_FILE"), "/e");
  EXPECT_EQ(get(env, "OMP_NUM_THREADS"), "1");
  EXPECT_EQ(get(env, "MLRUN_JOB_ID"), "job1");
  EXPECT_EQ(get(env, "MLRUN_BACKEND"), "gloo");
  EXPECT_EQ(get(env, "PATH"), "/bin");
  EXPECT_EQ(get(env, "MLRUN_RDZV_TOKEN"), "<unset>");
}

TEST(WorkerEnv, UserOmpNumThreadsWinsAndOneWorkerGetsNone) {
  GroupEnv g = two_nodes();
  auto env = worker_environment(Environment({"OMP_NUM_THREADS=8"}), g, 0, "");
  EXPECT_EQ(get(env, "OMP_NUM_THREADS"), "8");
  g.local_world_size = 1;
  env = worker_environment(Environment(), g, 0, "");
  EXPECT_EQ(get(env, "OMP_NUM_THREADS"), "<unset>");
}

TEST(WorkerEnv, OverridesReplaceAndDefaultsYield) {
  GroupEnv g = two_nodes();
  g.overrides = {{"FOO", "bar"}};
  g.defaults = {{"NCCL_DEBUG", "WARN"}, {"BAZ", "1"}};
  auto env = worker_environment(Environment({"FOO=old", "NCCL_DEBUG=INFO"}), g, 0, "");
  EXPECT_EQ(get(env, "FOO"), "bar");
  EXPECT_EQ(get(env, "NCCL_DEBUG"), "INFO");
  EXPECT_EQ(get(env, "BAZ"), "1");
}

TEST(WorkerEnv, RendezvousVariablesOnlyWithAServer) {
  GroupEnv g = two_nodes();
  g.rdzv_endpoint = "10.0.0.1:1234";
  g.rdzv_token = "secret";
  auto env = worker_environment(Environment(), g, 0, "");
  EXPECT_EQ(get(env, "MLRUN_RDZV_ENDPOINT"), "10.0.0.1:1234");
  EXPECT_EQ(get(env, "MLRUN_RDZV_TOKEN"), "secret");
}

TEST(Environment, SetKeepsOrderAndReplaces) {
  Environment e({"A=1", "B=2", "AB=3"});
  e.set("A", "9");
  ASSERT_NE(e.get("AB"), nullptr);
  EXPECT_EQ(*e.get("AB"), "AB=3");
  EXPECT_EQ(e.entries(), (std::vector<std::string>{"A=9", "B=2", "AB=3"}));
}

}  // namespace
}  // namespace mlrun
