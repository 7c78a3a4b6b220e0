#include "worker/log.h"

#include <cctype>
#include <cstdlib>
#include <memory>

#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "worker/net.h"

namespace mlrun::log {
namespace {

// Level is spdlog's level_enum, spelled out so that log.h needs no spdlog header.
spdlog::level::level_enum to_spdlog(Level level) {
  return static_cast<spdlog::level::level_enum>(level);
}
static_assert(static_cast<int>(Level::trace) == spdlog::level::trace);
static_assert(static_cast<int>(Level::info) == spdlog::level::info);
static_assert(static_cast<int>(Level::warn) == spdlog::level::warn);
static_assert(static_cast<int>(Level::err) == spdlog::level::err);
static_assert(static_cast<int>(Level::off) == spdlog::level::off);

// One logger for the process's life, so that a reference to it never dangles; init() changes its
// level and tag.
spdlog::logger& the_logger() {
  static spdlog::logger* logger = [] {
    // A plain (not colour) sink: lines stay readable in files and CI logs.
    auto* l = new spdlog::logger("mlrun", std::make_shared<spdlog::sinks::stderr_sink_mt>());
    l->set_pattern(fmt::format("[%H:%M:%S.%e] mlrun {} %l: %v", host_name()));
    l->set_level(spdlog::level::warn);
    // Every line is flushed: a launch that hangs must have said what it was doing.
    l->flush_on(spdlog::level::trace);
    return l;
  }();
  return *logger;
}

}  // namespace

std::optional<Level> parse_level(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "trace") return Level::trace;
  if (lower == "debug") return Level::debug;
  if (lower == "info") return Level::info;
  if (lower == "warning" || lower == "warn") return Level::warn;
  if (lower == "error") return Level::err;
  if (lower == "critical" || lower == "fatal") return Level::critical;
  if (lower == "off") return Level::off;
  return std::nullopt;
}

Level choose_level(const std::string& flag, int verbose, std::string* error) {
  constexpr std::string_view kNames = "trace, debug, info, warning, error, critical, off";
  if (!flag.empty()) {
    if (auto level = parse_level(flag)) return *level;
    if (error) *error = fmt::format("--log_level={}: must be one of {}", flag, kNames);
    return Level::warn;
  }
  if (verbose > 0) return verbose == 1 ? Level::info : Level::debug;
  const char* ours = std::getenv("MLRUN_LOG_LEVEL");
  if (ours != nullptr && *ours != '\0') {
    if (auto level = parse_level(ours)) return *level;
    if (error) *error = fmt::format("MLRUN_LOG_LEVEL={}: must be one of {}", ours, kNames);
    return Level::warn;
  }
  const char* torchrun = std::getenv("LOGLEVEL");
  if (torchrun != nullptr) {
    if (auto level = parse_level(torchrun)) return *level;
  }
  return Level::warn;
}

void init(Level level, const std::string& tag) {
  // The tag is part of the pattern, where '%' starts a flag: it is doubled.
  std::string escaped;
  for (char c : tag) escaped += c == '%' ? std::string("%%") : std::string(1, c);
  the_logger().set_pattern(fmt::format("[%H:%M:%S.%e] mlrun {} %l: %v", escaped));
  the_logger().set_level(to_spdlog(level));
}

Level level() {
  return static_cast<Level>(the_logger().level());
}

std::string_view level_name(Level level) {
  auto name = spdlog::level::to_string_view(to_spdlog(level));
  return {name.data(), name.size()};
}

bool enabled(Level level) {
  return the_logger().should_log(to_spdlog(level));
}

void write(Level level, std::string_view line) {
  the_logger().log(to_spdlog(level), line);
}

}  // namespace mlrun::log
