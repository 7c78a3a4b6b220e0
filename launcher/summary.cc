#include "launcher/summary.h"

#include <ctime>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace mlrun {

std::string format_time(WallTime t) {
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()).count();
  std::time_t secs = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  localtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return fmt::format("{}.{:03d}", buf, static_cast<int>(ms % 1000));
}

std::string read_error_file_message(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};
  try {
    auto j = nlohmann::json::parse(in);
    // torch.distributed.elastic writes {"message": {"message": "...", "extraInfo": {...}}}.
    const auto& m = j.at("message");
    if (m.is_string()) return m.get<std::string>();
    return m.at("message").get<std::string>();
  } catch (...) {
    return {};
  }
}

namespace {

std::string ranks_list(const std::vector<int>& ranks) {
  return fmt::format("{}", fmt::join(ranks, ","));
}

}  // namespace

std::string format_record_summary(const std::string& record) {
  try {
    auto r = nlohmann::json::parse(record);
    std::string out = fmt::format(
        "mlrun: job failed. First failure: rank {} (local rank {}, node {} ({}), pid {}): {} at "
        "{}\n",
        r.at("rank").get<int>(), r.at("local_rank").get<int>(), r.at("node").get<int>(),
        r.at("host").get<std::string>(), r.at("pid").get<int>(), r.at("status").get<std::string>(),
        r.at("time").get<std::string>());
    if (r.contains("error")) out += fmt::format("  error: {}\n", r["error"].get<std::string>());
    const auto& tail = r.at("tail");
    if (!tail.empty()) {
      out += fmt::format("  last stderr lines of rank {}:\n", r.at("rank").get<int>());
      for (const auto& l : tail) out += fmt::format("    | {}\n", l.get<std::string>());
    }
    return out;
  } catch (...) {
    return fmt::format("mlrun: job failed: {}\n", record);
  }
}

std::string format_failure_summary(const AttemptResult& result,
                                   const std::vector<std::deque<std::string>>& tails,
                                   const SummaryContext& ctx) {
  std::string out;
  auto line = [&out](std::string s) {
    out += s;
    out += '\n';
  };
  if (result.first_failure) {
    std::size_t i = *result.first_failure;
    const WorkerState& w = result.workers[i];
    line(fmt::format(
        "mlrun: job failed. First failure: rank {} (local rank {}, {}, pid {}): {} at {}",
        w.spec.rank, w.spec.local_rank, ctx.node, w.pid, describe_status(w.wait_status),
        format_time(w.ended_at)));
    if (ctx.error_message) {
      std::string message = ctx.error_message(w);
      if (!message.empty()) line(fmt::format("  error: {}", message));
    }
    if (i < tails.size() && !tails[i].empty()) {
      line(fmt::format("  last stderr lines of rank {}:", w.spec.rank));
      for (const auto& l : tails[i]) line(fmt::format("    | {}", l));
    }
  } else if (result.interrupt_signal != 0) {
    const char* abbrev = sigabbrev_np(result.interrupt_signal);
    line(fmt::format("mlrun: interrupted by SIG{}; workers stopped", abbrev ? abbrev : "?"));
  }
  std::vector<int> stopped;
  for (std::size_t i = 0; i < result.workers.size(); ++i) {
    const WorkerState& w = result.workers[i];
    if (result.first_failure && i == *result.first_failure) continue;
    if (w.end == WorkerEnd::kFailed) {
      line(fmt::format("  also failed: rank {} (local rank {}, pid {}): {} at {}", w.spec.rank,
                       w.spec.local_rank, w.pid, describe_status(w.wait_status),
                       format_time(w.ended_at)));
    } else if (w.end == WorkerEnd::kStopped) {
      stopped.push_back(w.spec.rank);
    }
  }
  if (!stopped.empty()) {
    line(fmt::format("  stopped by mlrun: rank{} {}", stopped.size() > 1 ? "s" : "",
                     ranks_list(stopped)));
  }
  return out;
}

}  // namespace mlrun
