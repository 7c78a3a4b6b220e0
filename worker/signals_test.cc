#include "worker/signals.h"

#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include <gtest/gtest.h>

namespace mlrun {
namespace {

TEST(SignalPolicy, DefaultsStopOnTorchrunsFourAndForwardTheUserSignals) {
  std::vector<std::string> errors;
  SignalPolicy p = make_signal_policy(kDefaultSignalsToHandle, errors);
  EXPECT_TRUE(errors.empty());
  EXPECT_EQ(p.stop, (std::vector<int>{SIGINT, SIGTERM, SIGHUP, SIGQUIT}));
  EXPECT_EQ(p.forward, (std::vector<int>{SIGUSR1, SIGUSR2}));
  EXPECT_TRUE(p.is_forwarded(SIGUSR2));
  EXPECT_FALSE(p.is_forwarded(SIGTERM));
}

TEST(SignalPolicy, ListedUserSignalBecomesAStopSignal) {
  std::vector<std::string> errors;
  SignalPolicy p = make_signal_policy("SIGUSR1", errors);
  EXPECT_TRUE(errors.empty());
  // INT, TERM and HUP stop the job whether listed or not.
  EXPECT_EQ(p.stop, (std::vector<int>{SIGINT, SIGTERM, SIGHUP, SIGUSR1}));
  EXPECT_EQ(p.forward, std::vector<int>{SIGUSR2});
}

TEST(SignalPolicy, NamesInAnySpellingAndBadNamesReported) {
  EXPECT_EQ(signal_from_name("usr2"), SIGUSR2);
  EXPECT_EQ(signal_from_name(" SIGTERM"), SIGTERM);
  EXPECT_EQ(signal_from_name("SIGKILL"), 0);
  EXPECT_EQ(signal_name(SIGUSR1), "SIGUSR1");
  std::vector<std::string> errors;
  SignalPolicy p = make_signal_policy("SIGTERM,SIGBOGUS,,SIGKILL,USR2", errors);
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_NE(errors[0].find("'SIGBOGUS'"), std::string::npos);
  EXPECT_NE(errors[1].find("'SIGKILL'"), std::string::npos);
  EXPECT_EQ(p.forward, std::vector<int>{SIGUSR1});
}

std::atomic<pid_t> g_handled_by{0};

pid_t this_thread_id() {
  return static_cast<pid_t>(syscall(SYS_gettid));
}

TEST(ThreadWithoutSignals, BlocksTheAsynchronousSignalsOnItsThreadOnly) {
  sigset_t before, inside, after;
  pthread_sigmask(SIG_SETMASK, nullptr, &before);
  std::thread t = thread_without_signals([&] { pthread_sigmask(SIG_SETMASK, nullptr, &inside); });
  t.join();
  pthread_sigmask(SIG_SETMASK, nullptr, &after);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCHLD, SIGPIPE, SIGALRM})
    EXPECT_EQ(sigismember(&inside, sig), 1) << sig;
  // Faults are the thread's own.
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT})
    EXPECT_EQ(sigismember(&inside, sig), 0);
  for (int sig = 1; sig < NSIG; ++sig) {
    EXPECT_EQ(sigismember(&before, sig), sigismember(&after, sig)) << "the caller's mask changed";
  }
}

// A signal sent to the process while every other thread blocks it waits for one that takes it:
// the helper, waiting in poll() all along, never runs its handler.
TEST(ThreadWithoutSignals, TakesNoSignalOfTheProcess) {
  struct sigaction sa {
  }, old_action{};
  sa.sa_handler = [](int) { g_handled_by = this_thread_id(); };
  sigemptyset(&sa.sa_mask);
  ASSERT_EQ(sigaction(SIGUSR2, &sa, &old_action), 0);
  sigset_t usr2, old_mask;
  sigemptyset(&usr2);
  sigaddset(&usr2, SIGUSR2);
  pthread_sigmask(SIG_BLOCK, &usr2, &old_mask);
  int wake[2];
  ASSERT_EQ(pipe(wake), 0);
  std::atomic<bool> polling{false};
  std::thread helper = thread_without_signals([&] {
    polling = true;
    pollfd p{wake[0], POLLIN, 0};
    while (poll(&p, 1, -1) < 0) {
    }
  });
  while (!polling) std::this_thread::yield();
  ASSERT_EQ(kill(getpid(), SIGUSR2), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(g_handled_by.load(), 0) << "the helper thread took the signal";
  sigset_t pending;
  sigpending(&pending);
  EXPECT_EQ(sigismember(&pending, SIGUSR2), 1);
  ASSERT_EQ(write(wake[1], "x", 1), 1);
  helper.join();
  // Unblocked here, it is this thread's at once.
  pthread_sigmask(SIG_SETMASK, &old_mask, nullptr);
  EXPECT_EQ(g_handled_by.load(), this_thread_id());
  sigaction(SIGUSR2, &old_action, nullptr);
  close(wake[0]);
  close(wake[1]);
}

}  // namespace
}  // namespace mlrun
