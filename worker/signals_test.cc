#include "worker/signals.h"

#include <signal.h>

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

}  // namespace
}  // namespace mlrun
