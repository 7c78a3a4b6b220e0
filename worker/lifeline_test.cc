#include "worker/lifeline.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include <gtest/gtest.h>

namespace mlrun {
namespace {

using namespace std::chrono_literals;

// How a child that stands for a launcher ended: its wait status and how long after `since`.
struct Ended {
  int status = 0;
  std::chrono::milliseconds after{0};
};

// Waits up to `bound` for pid; SIGKILLs it (and reports status 0) when it is still there.
Ended wait_for(pid_t pid, std::chrono::steady_clock::time_point since,
               std::chrono::milliseconds bound) {
  Ended e;
  while (std::chrono::steady_clock::now() - since < bound) {
    if (waitpid(pid, &e.status, WNOHANG) == pid) {
      e.after = std::chrono::duration_cast<std::chrono::milliseconds>(
          std::chrono::steady_clock::now() - since);
      return e;
    }
    std::this_thread::sleep_for(10ms);
  }
  kill(pid, SIGKILL);
  waitpid(pid, nullptr, 0);
  e.status = 0;
  e.after = bound;
  return e;
}

// A launcher (a forked child) with a lifeline watching `watch`, started with a bound of a
// minute; `before_hangup`: the bound it sets before the watched end closes, else after (while
// the lifeline counts down). Returns how the launcher ended once the test closed the other end.
Ended launcher_with_new_bound(bool before_hangup) {
  int watch[2], go[2];
  EXPECT_EQ(pipe(watch), 0);
  EXPECT_EQ(pipe(go), 0);
  pid_t launcher = fork();
  if (launcher == 0) {
    close(watch[1]);
    close(go[1]);
    Lifeline l = Lifeline::fork_now(watch[0], 60s);
    if (before_hangup) l.set_bound(200ms);
    // Told once the watched end has closed.
    char c;
    while (read(go[0], &c, 1) < 0) {
    }
    if (!before_hangup) {
      // The lifeline has seen the hang-up (it polls the pipe at once); give it time to.
      std::this_thread::sleep_for(100ms);
      l.set_bound(200ms);
    }
    while (true) pause();
  }
  close(watch[0]);
  close(go[0]);
  std::this_thread::sleep_for(100ms);
  auto hung_up = std::chrono::steady_clock::now();
  close(watch[1]);
  char c = 'g';
  EXPECT_EQ(write(go[1], &c, 1), 1);
  close(go[1]);
  return wait_for(launcher, hung_up, 20s);
}

// An agent forks its lifeline before it knows its grace period and tells it later: the later
// bound is the one that counts, set before the head's end or while the lifeline counts down.
TEST(Lifeline, ANewBoundIsTheOneThatCounts) {
  for (bool before : {true, false}) {
    Ended e = launcher_with_new_bound(before);
    ASSERT_TRUE(WIFSIGNALED(e.status)) << "before hang-up: " << before << ", status " << e.status;
    EXPECT_EQ(WTERMSIG(e.status), SIGKILL);
    // The minute it was started with would be far past this.
    EXPECT_LT(e.after, 10s) << "before hang-up: " << before;
    EXPECT_GE(e.after, 150ms) << "before hang-up: " << before;
  }
}

// Without a new bound, the one it was started with: the launcher outlives a short wait.
TEST(Lifeline, TheStartingBoundHoldsUntilChanged) {
  int watch[2];
  ASSERT_EQ(pipe(watch), 0);
  pid_t launcher = fork();
  if (launcher == 0) {
    close(watch[1]);
    Lifeline l = Lifeline::fork_now(watch[0], 1500ms);
    while (true) pause();
  }
  close(watch[0]);
  std::this_thread::sleep_for(100ms);
  auto hung_up = std::chrono::steady_clock::now();
  close(watch[1]);
  Ended e = wait_for(launcher, hung_up, 20s);
  ASSERT_TRUE(WIFSIGNALED(e.status)) << e.status;
  EXPECT_EQ(WTERMSIG(e.status), SIGKILL);
  EXPECT_GE(e.after, 1400ms);
}

std::string command_line_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  while (!text.empty() && text.back() == '\0') text.pop_back();
  return text;
}

// A forked lifeline names itself, so that `pgrep -f` and `pkill -f 'mlrun agent'` do not take
// it for its launcher; the launcher's own command line stays as it was.
TEST(Lifeline, AForkedLifelineNamesItsCommandLine) {
  const std::string mine = command_line_of(getpid());
  ASSERT_FALSE(mine.empty());
  Lifeline l = Lifeline::fork_now();
  ASSERT_TRUE(l.active());
  std::string seen;
  for (int i = 0; i < 500 && (seen = command_line_of(l.pid())) != "mlrun-lifeline"; ++i) {
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(seen, "mlrun-lifeline");
  EXPECT_EQ(command_line_of(getpid()), mine);
  const pid_t pid = l.pid();
  l = Lifeline();  // Its pipe's end: it exits.
  EXPECT_EQ(waitpid(pid, nullptr, 0), pid);
}

}  // namespace
}  // namespace mlrun
