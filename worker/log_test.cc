#include "worker/log.h"

#include <cstdlib>

#include <gtest/gtest.h>

namespace mlrun::log {
namespace {

// Sets an environment variable for one test and restores it after.
struct ScopedEnv {
  std::string name;
  std::optional<std::string> old;
  ScopedEnv(std::string n, const char* value) : name(std::move(n)) {
    if (const char* v = std::getenv(name.c_str())) old = v;
    value ? setenv(name.c_str(), value, 1) : unsetenv(name.c_str());
  }
  ~ScopedEnv() { old ? setenv(name.c_str(), old->c_str(), 1) : unsetenv(name.c_str()); }
};

TEST(LogLevel, NamesInAnyCaseIncludingPythons) {
  EXPECT_EQ(parse_level("debug"), Level::debug);
  EXPECT_EQ(parse_level("INFO"), Level::info);
  EXPECT_EQ(parse_level("WARNING"), Level::warn);
  EXPECT_EQ(parse_level("warn"), Level::warn);
  EXPECT_EQ(parse_level("Critical"), Level::critical);
  EXPECT_EQ(parse_level("off"), Level::off);
  EXPECT_EQ(parse_level("loud"), std::nullopt);
}

TEST(LogLevel, FlagThenVerboseThenMlrunThenTorchrunThenWarning) {
  ScopedEnv ours("MLRUN_LOG_LEVEL", nullptr);
  ScopedEnv torchrun("LOGLEVEL", nullptr);
  std::string error;
  EXPECT_EQ(choose_level("", 0, &error), Level::warn);
  setenv("LOGLEVEL", "DEBUG", 1);
  EXPECT_EQ(choose_level("", 0, &error), Level::debug);
  setenv("MLRUN_LOG_LEVEL", "error", 1);
  EXPECT_EQ(choose_level("", 0, &error), Level::err);
  EXPECT_EQ(choose_level("", 1, &error), Level::info);
  EXPECT_EQ(choose_level("", 2, &error), Level::debug);
  EXPECT_EQ(choose_level("trace", 1, &error), Level::trace);
  EXPECT_TRUE(error.empty());
}

TEST(LogLevel, UnknownNamesAreErrorsExceptTorchrunsShared) {
  ScopedEnv ours("MLRUN_LOG_LEVEL", nullptr);
  ScopedEnv torchrun("LOGLEVEL", "chatty");
  std::string error;
  EXPECT_EQ(choose_level("", 0, &error), Level::warn);
  EXPECT_TRUE(error.empty());
  EXPECT_EQ(choose_level("loud", 0, &error), Level::warn);
  EXPECT_EQ(error,
            "--log_level=loud: must be one of trace, debug, info, warning, error, critical, off");
  error.clear();
  setenv("MLRUN_LOG_LEVEL", "loud", 1);
  choose_level("", 0, &error);
  EXPECT_NE(error.find("MLRUN_LOG_LEVEL=loud"), std::string::npos);
}

}  // namespace
}  // namespace mlrun::log
