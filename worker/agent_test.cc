// The node's loop (worker/agent.h) with a real spawner and real processes.
#include "worker/agent.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>

#include "worker/process.h"

namespace mlrun {
namespace {

// One node's loop over real processes, its one worker `/bin/sh -c script` reading stdin_fd
// (-1: /dev/null).
struct ShellLoop {
  boost::asio::io_context io;
  std::unique_ptr<ProcessSpawner> spawner = make_posix_spawner();
  Lifeline lifeline;
  int run(const char* script, AgentCallbacks callbacks, int stdin_fd = -1) {
    Supervisor::Planner planner = [script, stdin_fd](int) {
      WorkerSpec w;
      w.request.argv = {"/bin/sh", "-c", script};
      w.request.stdin_fd = stdin_fd;
      return std::vector<WorkerSpec>{w};
    };
    Agent agent(io, *spawner, lifeline, planner, SupervisorConfig{}, std::move(callbacks));
    return agent.run();
  }
};

// The exit code of a loop that runs one worker, `/bin/sh -c script`, its output nowhere.
int run_one_worker(const char* script) {
  AgentCallbacks callbacks;
  callbacks.routes = [](int, const WorkerSpec&) { return WorkerRoutes{}; };
  return ShellLoop().run(script, callbacks);
}

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
  EXPECT_EQ(run_one_worker("exit 0"), 0);
  int status = 0;
  ASSERT_EQ(waitpid(other, &status, 0), other)
      << "the loop took the exit of a child that is not one of its workers";
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 7);
}

// Callbacks that send every worker's stdout to fd, tagged "[0] ".
AgentCallbacks stdout_to(int fd) {
  AgentCallbacks callbacks;
  callbacks.routes = [fd](int, const WorkerSpec&) {
    WorkerRoutes r;
    r.out.console_fd = fd;
    r.out.prefix = "[0] ";
    return r;
  };
  return callbacks;
}

// An unfinished line is shown as it is kPartialLineIdle after its first byte. When the loop is
// held past that wait (a stopped agent, a busy machine) while the line's rest and the start of
// the next line come, the wait reads them first: it finishes the line and shows the next one's
// start, whose rest then goes on untagged. (When each read re-armed the wait, the one that came
// due meanwhile ran all the same and cut the line a read had left a moment ago: "[0] cccc[0]
// dddd"; cli.relay_stall, under TSan, lost a line so.)
TEST(AgentLoop, AWaitDueWhileTheLoopWasHeldCutsNoLine) {
  int console[2], go[2];
  ASSERT_EQ(pipe(console), 0);
  ASSERT_EQ(pipe(go), 0);
  ShellLoop loop;
  boost::asio::io_context& io = loop.io;
  std::thread driver([&] {
    using namespace std::chrono_literals;
    // "aaaa" read and its wait armed, as a rule (a late driver only lets it show as a prompt).
    std::this_thread::sleep_for(30ms);
    std::promise<void> held;
    boost::asio::post(io, [&] {
      EXPECT_EQ(write(go[1], "\n", 1), 1);  // "bbbb\ncccc" comes while the loop is held...
      std::this_thread::sleep_for(300ms);   // ...past the wait for "aaaa"
      held.set_value();
    });
    held.get_future().wait();
    // "dddd", after the loop's read of "cccc" (as a rule: dddd read with it proves nothing but
    // fails nothing) and well within kPartialLineIdle of it.
    std::this_thread::sleep_for(5ms);
    EXPECT_EQ(write(go[1], "\n", 1), 1);
  });
  EXPECT_EQ(loop.run("printf aaaa; read x; printf 'bbbb\\ncccc'; read x; printf 'dddd\\n'",
                     stdout_to(console[1]), go[0]),
            0);
  driver.join();
  close(console[1]);
  std::string shown;
  char buf[256];
  for (ssize_t n; (n = read(console[0], buf, sizeof buf)) > 0;) shown.append(buf, n);
  close(console[0]);
  close(go[0]);
  close(go[1]);
  // "[0] aaaabbbb\n[0] ccccdddd\n"; "[0] aaaa[0] bbbb\n..." where the driver came late.
  EXPECT_TRUE(shown.ends_with("bbbb\n[0] ccccdddd\n")) << shown;
}

// A progress bar redraws its line ('\r') more often than kPartialLineIdle and ends it only when
// done: the line is shown within kPartialLineIdle of its first byte, not once bytes stop coming
// (which showed a tqdm bar only at its end).
TEST(AgentLoop, AnUnfinishedLineIsShownWhileMoreOfItComes) {
  int console[2];
  ASSERT_EQ(pipe2(console, O_NONBLOCK), 0);
  std::string early;
  std::thread watcher([&] {
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(1200);
    char buf[256];
    while (std::chrono::steady_clock::now() < until && early.find("tick") == std::string::npos) {
      ssize_t n = read(console[0], buf, sizeof buf);
      if (n > 0) early.append(buf, static_cast<std::size_t>(n));
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  // At least 60 x 30 ms: 1.8 s before its newline.
  EXPECT_EQ(ShellLoop().run("i=0; while [ $i -lt 60 ]; do printf '\\rtick'; sleep 0.03; "
                            "i=$((i+1)); done; echo",
                            stdout_to(console[1])),
            0);
  watcher.join();
  close(console[0]);
  close(console[1]);
  EXPECT_NE(early.find("\r[0] tick"), std::string::npos)
      << "nothing of the bar shown in its first 1.2 s: '" << early << "'";
}

// A head blocks its stop signals until its node's loop can take them (launcher/launch_hosts.cc).
// One that came in between is pending on the loop's thread: the loop takes it as it starts, and
// the job stops as at any Ctrl-C, instead of running on with the signal never seen.
TEST(AgentLoop, ASignalPendingBeforeTheLoopStopsTheJob) {
  struct sigaction old_action {};
  sigaction(SIGINT, nullptr, &old_action);
  sigset_t sigint, old_mask;
  sigemptyset(&sigint);
  sigaddset(&sigint, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigint, &old_mask);
  ASSERT_EQ(pthread_kill(pthread_self(), SIGINT), 0);  // Pending on this thread only.
  int code = run_one_worker("exec sleep 5");
  sigset_t pending;
  sigpending(&pending);
  bool still_pending = sigismember(&pending, SIGINT) == 1;
  if (still_pending) {
    timespec now{0, 0};
    sigtimedwait(&sigint, nullptr, &now);  // Taken here, not by the default action.
  }
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  sigaction(SIGINT, &old_action, nullptr);
  EXPECT_FALSE(still_pending);
  // 128 + SIGINT, the worker stopped: not 0 after its 5 s.
  EXPECT_EQ(code, 130);
}

}  // namespace
}  // namespace mlrun
