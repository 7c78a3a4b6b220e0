// The per-rank log directory (--log_dir, or a fresh one when --redirects / --tee ask for files).
// On a shared machine another user may have planted a directory or a symlink at a predictable
// path: a directory is used only when it is ours and nobody else may write into it, and nothing
// under it is reached through a symlink.
#pragma once

#include <string>

namespace mlrun {

/// The directory log files go to. `given` (--log_dir) is created when missing; an existing one
/// must be a directory owned by this user without group or world write permission. Empty
/// `given`: a fresh directory $TMPDIR/mlrun-logs-JOB-XXXXXX (mkdtemp). Returns the directory, or
/// an empty string with `why` set to a one-line error naming the path and the cause.
std::string prepare_log_dir(const std::string& given, const std::string& job_id, std::string& why);

/// Why an existing --log_dir may not be used (not a directory, not ours, writable by others), as
/// a one-line error; empty when it may be used or does not exist yet.
std::string log_dir_problem(const std::string& dir);

/// Why `path`, a directory that exists, may not hold our files; empty when it may.
std::string unsafe_because(const std::string& path);

/// Makes ROOT/attempt_N/RANK (mode 0755 at most), refusing any component that is a symlink or
/// not ours. Returns false with errno set when it cannot.
bool make_rank_dir(const std::string& root, int attempt, int rank);

/// Opens (creates, truncates) a log file for appending without following a symlink in its last
/// component. Returns the descriptor (close-on-exec) or -1.
int open_log_file(const std::string& path);

}  // namespace mlrun
