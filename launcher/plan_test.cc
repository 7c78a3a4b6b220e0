#include "launcher/plan.h"

#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "launcher/options.h"

namespace mlrun {
namespace {

LaunchPlan plan_of(std::vector<std::string> args, bool* ok, const GetEnv& getenv = nullptr) {
  ParseResult parsed = parse_options(args, getenv);
  std::vector<std::string> errors;
  for (auto& e : parsed.errors) errors.push_back(e.message);
  LaunchPlan plan;
  *ok = plan_launch(parsed.options, plan, errors);
  return plan;
}

// What can differ from node to node (a program missing on this one) is told apart from the
// command line's errors, which every node started alike meets: only the first kind makes a
// node end the others' wait (launcher/run.cc, tell_the_other_nodes).
TEST(PlanLaunch, AProgramMissingHereIsThisNodesOwnError) {
  bool ok = true;
  LaunchPlan plan = plan_of({"--nnodes=2", "--node_rank=1", "--master_addr=127.0.0.1",
                             "--no_python", "/nonexistent/mlrun-plan-test"},
                            &ok);
  EXPECT_FALSE(ok);
  ASSERT_EQ(plan.node_errors.size(), 1u);
  EXPECT_NE(plan.node_errors[0].find("/nonexistent/mlrun-plan-test"), std::string::npos);
}

TEST(PlanLaunch, CommandLineErrorsAreUsageErrors) {
  bool ok = true;
  LaunchPlan conf = plan_of({"--nnodes=2", "--rdzv_conf", "join_timeout=soon", "--no_python",
                             "/nonexistent/mlrun-plan-test"},
                            &ok);
  EXPECT_FALSE(ok);
  EXPECT_TRUE(conf.node_errors.empty());  // The missing program is said, but tells nobody.
  LaunchPlan flag = plan_of({"--nnodes=2", "--no-such-flag", "/bin/true"}, &ok);
  EXPECT_FALSE(ok);
  EXPECT_TRUE(flag.node_errors.empty());
  // Said all the same, for an agent, which planned what its head planned without an error.
  ASSERT_EQ(flag.errors.size(), 1u);
  EXPECT_NE(flag.errors[0].find("--no-such-flag"), std::string::npos) << flag.errors[0];
  EXPECT_EQ(conf.errors.size(), 2u);
}

// torchrun waits out join_timeout (600 s) for a second node that cannot reach a --standalone
// rendezvous; mlrun refuses the command line (its message: tests/cli/bad_input.sh).
TEST(PlanLaunch, StandaloneRefusesAtLeastTwoNodes) {
  bool ok = true;
  LaunchPlan two = plan_of({"--standalone", "--nnodes=2", "/bin/true"}, &ok);
  EXPECT_FALSE(ok);
  EXPECT_TRUE(two.node_errors.empty());  // A usage error: every node meets it alike.
  plan_of({"--standalone", "--nnodes=3:4", "/bin/true"}, &ok);
  EXPECT_FALSE(ok);
  // One node, or a range that one node satisfies, runs as torchrun runs it.
  plan_of({"--standalone", "--nnodes=1:2", "/bin/true"}, &ok);
  EXPECT_TRUE(ok);
  plan_of({"--standalone", "/bin/true"}, &ok);
  EXPECT_TRUE(ok);
}

// A PyTorchJob pod sets PET_* for torchrun: where mlrun refuses one with another option, the error
// names the variable, not a flag the user never typed.
TEST(PlanLaunch, ErrorsNameThePetVariablesTheyConcern) {
  auto env = [](std::map<std::string, std::string> vars) -> GetEnv {
    return [vars](const std::string& name) -> const char* {
      auto it = vars.find(name);
      return it == vars.end() ? nullptr : it->second.c_str();
    };
  };
  bool ok = true;
  LaunchPlan hosts = plan_of({"-H", "localhost:2", "/bin/true"}, &ok,
                             env({{"PET_NPROC_PER_NODE", "auto"}, {"PET_NNODES", "2"}}));
  EXPECT_FALSE(ok);
  ASSERT_EQ(hosts.errors.size(), 2u);
  EXPECT_EQ(hosts.errors[0],
            "PET_NPROC_PER_NODE=auto: give a number with --hostfile or -H (each host counts its "
            "own)");
  EXPECT_EQ(hosts.errors[1],
            "--hostfile/-H start every node from here: PET_NNODES=2 is for starting nodes one by "
            "one");
  LaunchPlan signals = plan_of({"/bin/true"}, &ok, env({{"PET_SIGNALS_TO_HANDLE", "SIGX"}}));
  EXPECT_FALSE(ok);
  ASSERT_EQ(signals.errors.size(), 1u);
  EXPECT_NE(signals.errors[0].find("'SIGX' is not a signal"), std::string::npos);
  EXPECT_NE(signals.errors[0].find("(from PET_SIGNALS_TO_HANDLE)"), std::string::npos);
  LaunchPlan conf = plan_of({"/bin/true"}, &ok, env({{"PET_RDZV_CONF", "foo"}}));
  ASSERT_EQ(conf.errors.size(), 1u);
  EXPECT_EQ(conf.errors[0], "--rdzv_conf: 'foo' is not key=value (from PET_RDZV_CONF)");
}

}  // namespace
}  // namespace mlrun
