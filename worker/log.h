// mlrun's own leveled log (spdlog): what the launcher, the head and the agents are doing, for a
// person who wants to see why a launch is slow or stuck. Separate from the workers' output, which
// goes to the terminal whatever the level. Lines go to stderr as
//   [07:45:01.123] mlrun host1 info: hosts connected 3/3 in 0.41 s
// tagged with the host that wrote them, so remote agents' lines, relayed by the head, say where
// they come from. The default level (warning) adds nothing to today's output.
//
// spdlog stays inside log.cc: its headers cost ~8 s of compile time in each file that included
// them (9 s against 1 s for one call, measured with g++ 12 -O2), and 15 files log.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include <fmt/format.h>

namespace mlrun::log {

/// spdlog's levels, in its order (log.cc checks that they match).
enum class Level { trace, debug, info, warn, err, critical, off };

/// A level by name, any case: trace, debug, info, warning (warn), error, critical (fatal), off;
/// Python's names as torchrun's LOGLEVEL takes them are among these. nullopt: not a level.
std::optional<Level> parse_level(std::string_view name);

/// The level chosen by, first to last: --log_level, -v (info) / -vv (debug), MLRUN_LOG_LEVEL,
/// torchrun's LOGLEVEL; else warning. An unknown --log_level or MLRUN_LOG_LEVEL is an error
/// (returned text names it); an unknown LOGLEVEL is ignored, since other tools read it too.
Level choose_level(const std::string& flag, int verbose, std::string* error);

/// Where lines go from now on: stderr, at level, tagged with tag (the host name).
void init(Level level, const std::string& tag);

/// The level in force: warning until init().
Level level();

/// spdlog's name of a level ("warning", "error"), which parse_level() reads back.
std::string_view level_name(Level level);

/// Whether a line at level is written.
bool enabled(Level level);

/// Writes one line at level (if enabled): stderr, tagged with this host's name until init().
void write(Level level, std::string_view line);

/// Seconds since t, for messages that say how long a step took.
inline double since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

template <typename... Args>
void debug(fmt::format_string<Args...> format, Args&&... args) {
  if (enabled(Level::debug)) write(Level::debug, fmt::format(format, std::forward<Args>(args)...));
}
template <typename... Args>
void info(fmt::format_string<Args...> format, Args&&... args) {
  if (enabled(Level::info)) write(Level::info, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace mlrun::log
