// The node's loop (worker/agent.h) with a real spawner and real processes.
#include "worker/agent.h"

#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>
#include <boost/asio/io_context.hpp>

#include "worker/process.h"

namespace mlrun {
namespace {

// The loop waits for its workers by pid. A process may have other children whose ends are their
// own code's to take: an interior agent's simulated children of the launch tree
// (transport/local.h), whose relay waits for each by pid. A waitpid(-1) on the loop took such an
// exit first, and the child's own wait then failed ("waitpid: No child processes"), which the
// relay reported as the node lost.
TEST(AgentLoop, TakesTheExitsOfItsWorkersAndOfNoOtherChild) {
  // Ended before the loop starts: its zombie is there at the worker's SIGCHLD.
  pid_t other = fork();
  ASSERT_GE(other, 0);
  if (other == 0) _exit(7);
  boost::asio::io_context io;
  auto spawner = make_posix_spawner();
  Lifeline lifeline;
  AgentCallbacks callbacks;
  callbacks.routes = [](int, const WorkerSpec&) { return WorkerRoutes{}; };
  Supervisor::Planner planner = [](int) {
    WorkerSpec w;
    w.request.argv = {"/bin/sh", "-c", "exit 0"};
    return std::vector<WorkerSpec>{w};
  };
  Agent agent(io, *spawner, lifeline, planner, SupervisorConfig{}, callbacks);
  EXPECT_EQ(agent.run(), 0);
  int status = 0;
  ASSERT_EQ(waitpid(other, &status, 0), other)
      << "the loop took the exit of a child that is not one of its workers";
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 7);
}

}  // namespace
}  // namespace mlrun
