#include "worker/process.h"

#include <signal.h>
#include <sys/wait.h>

#include <cerrno>

#include <gtest/gtest.h>

namespace mlrun {
namespace {

// Started now, collected later: its output on both streams and its exit code.
TEST(BoundedChild, CollectsOutputAndExitLater) {
  BoundedChild child({"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}, 10);
  EXPECT_GT(child.pid(), 0);
  BoundedRun r = child.wait();
  EXPECT_TRUE(r.error.empty());
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.out, "out\n");
  EXPECT_EQ(r.err, "err\n");
  ASSERT_TRUE(WIFEXITED(r.status));
  EXPECT_EQ(WEXITSTATUS(r.status), 3);
}

// Never awaited (the caller gave up first): the command is killed and reaped, not left running
// or a zombie.
TEST(BoundedChild, DestroyedUnawaitedKillsAndReaps) {
  pid_t pid = 0;
  {
    BoundedChild child({"/bin/sleep", "100"}, 10);
    pid = child.pid();
    ASSERT_GT(pid, 0);
  }
  EXPECT_EQ(kill(pid, 0), -1);
  EXPECT_EQ(errno, ESRCH);
}

TEST(BoundedChild, DeadlineKillsTheCommand) {
  BoundedChild child({"/bin/sleep", "100"}, 0.2);
  BoundedRun r = child.wait();
  EXPECT_TRUE(r.timed_out);
  ASSERT_TRUE(WIFSIGNALED(r.status));
  EXPECT_EQ(WTERMSIG(r.status), SIGKILL);
}

// argv[0] is the caller's to resolve: one that cannot be run ends as a failed command.
TEST(BoundedChild, AProgramThatIsNotThereFails) {
  BoundedChild child({"/nonexistent/mlrun-no-such-program"}, 10);
  BoundedRun r = child.wait();
  EXPECT_FALSE(r.timed_out);
  EXPECT_FALSE(r.error.empty() && WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0);
}

}  // namespace
}  // namespace mlrun
