// The one summary a failed job prints (docs/design.md §7): the first failure with its last stderr
// lines, then the other failures, then the workers mlrun stopped.
#pragma once

#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "worker/supervisor.h"

namespace mlrun {

struct SummaryContext {
  std::string node;  ///< "node 0 (hostname)".
  /// The message a worker left in its TORCHELASTIC_ERROR_FILE, or empty.
  std::function<std::string(const WorkerState&)> error_message;
};

std::string format_failure_summary(const AttemptResult& result,
                                   const std::vector<std::deque<std::string>>& stderr_tails,
                                   const SummaryContext& context);

/// The summary of a failure recorded by another node (coordinator/node.cc's record: JSON with
/// node, host, rank, local_rank, pid, status, time, tail and error).
std::string format_record_summary(const std::string& record);

/// "2026-11-29 19:40:12.123" in local time.
std::string format_time(WallTime t);

/// The "message" of a PyTorch elastic error file, or empty when it cannot be read.
std::string read_error_file_message(const std::string& path);

}  // namespace mlrun
