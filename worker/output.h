// Worker output: bytes from a worker's pipes become whole lines on the launcher's terminal,
// tagged with the rank, copied raw to per-rank log files, and remembered (the last lines of
// stderr) for the failure summary.
#pragma once

#include <chrono>
#include <cstddef>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace mlrun {

/// Longest line kept whole; a longer one is cut into pieces of this size so that memory stays
/// bounded whatever a worker prints.
inline constexpr std::size_t kMaxLineBytes = 64 * 1024;

/// How long an unfinished line waits for its newline before it is shown as it is, counted from
/// its first byte not yet shown, so that a prompt such as pdb's "(Pdb) " appears, and a progress
/// bar that redraws itself with '\r' more often than this is still seen as it moves
/// (StreamOutput::flush_partial, called by the agent).
inline constexpr std::chrono::milliseconds kPartialLineIdle{100};

/// The longest line the failure summary's tail keeps of a stderr line; the rest is counted.
inline constexpr std::size_t kTailLineBytes = 1024;

/// Splits a byte stream into lines (without the '\n').
class LineSplitter {
 public:
  /// Appends data and calls on_line for every line it completes.
  void feed(std::string_view data, const std::function<void(std::string_view)>& on_line);
  /// Calls on_line for a final line that had no '\n', if any.
  void finish(const std::function<void(std::string_view)>& on_line);
  /// Whether bytes of an unfinished line are held.
  bool has_partial() const { return !partial_.empty(); }

 private:
  std::string partial_;
};

/// The last `capacity` lines seen.
class LineTail {
 public:
  explicit LineTail(std::size_t capacity) : capacity_(capacity) {}
  void push(std::string_view line);
  const std::deque<std::string>& lines() const { return lines_; }

 private:
  std::size_t capacity_;
  std::deque<std::string> lines_;
};

/// Writes all of data to fd, retrying short writes. Returns false once fd refuses (EPIPE, ...).
bool write_all(int fd, std::string_view data);

/// How long the launcher waits for its terminal (or the pipe it writes to) to take output.
/// Past it the output is dropped and counted, and the console gets no more waiting until it
/// takes bytes again: a reader that stopped reading never blocks signals or teardown.
inline constexpr std::chrono::milliseconds kConsoleStall{1000};

/// What an agent started by a head (over SSH, or simulated) waits instead: its stdout and stderr
/// are its parent's relay, mlrun's own reader, which a parent busy with many agents or stopped
/// for a moment leaves unread for more than a second, and its lines must not be lost for that.
/// A parent that reads nothing for this long is stopped or hung (its heartbeats end the job);
/// the agent's loop, which this wait holds, answers an abort at most this much later, once. An
/// agent in a Slurm step keeps kConsoleStall: its output goes to srun, whose reader is the user's.
inline constexpr std::chrono::milliseconds kRelayStall{10000};

/// The stall console_write waits for in this process: kConsoleStall unless set.
void set_console_stall(std::chrono::milliseconds stall);
std::chrono::milliseconds console_stall();

/// Writes data to a console fd (stdout, stderr) within console_stall(), dropping what does not fit;
/// when the console takes bytes again, a note with the count of dropped lines comes first.
/// Returns false once fd refuses (EPIPE, ...). Thread-safe: data reaches fd whole, never cut by
/// another thread's call, and in writes of whole lines of at most PIPE_BUF bytes, which a pipe
/// never interleaves with another process's writes.
/// `leaves_unfinished`: the writer whose line data leaves unfinished on the console (it does not
/// end with a newline), which console_mid_line_owner() then names until the next write; nullptr
/// when data ends its lines.
bool console_write(int fd, std::string_view data, const void* leaves_unfinished = nullptr);

/// The writer of the last console write when that write left its line unfinished, else nullptr.
const void* console_mid_line_owner();

/// The terminal's line ended outside console_write: the user typed a line at a prompt, which the
/// terminal echoed. The next line is tagged again.
void console_line_ended();

/// Lines dropped by console_write in this process so far.
std::size_t console_dropped_lines();

/// torchrun 2.x's --duplicate_stdout_filters / --duplicate_stderr_filters: every line that
/// contains one of the needles is also written, as the console shows it (prefix + line), to one
/// file, which the streams that hold it share (a node's ranks in one attempt).
class DuplicateLog {
 public:
  DuplicateLog(int fd, std::vector<std::string> needles) : fd_(fd), needles_(std::move(needles)) {}
  DuplicateLog(const DuplicateLog&) = delete;
  DuplicateLog& operator=(const DuplicateLog&) = delete;
  ~DuplicateLog();  ///< Closes the file.
  /// Writes prefix + line + '\n' in one write() when line holds a needle.
  void offer(std::string_view prefix, std::string_view line) const;

 private:
  int fd_;
  std::vector<std::string> needles_;
};

/// Where one stream of one worker goes.
struct StreamRoute {
  int console_fd = -1;  ///< -1: not shown on the terminal.
  std::string prefix;   ///< Put before every console line, e.g. "[3] ".
  int file_fd = -1;     ///< -1: no log file. Receives the bytes unchanged.
  bool keep_tail = false;
  /// Set: the console text of a line (without its newline), replacing prefix + line; e.g.
  /// re-tagging mpirun's "[1,3]<stdout>:text" as "[3] text". May hold several lines.
  std::function<std::string(std::string_view line)> retag;
  /// Set: whole lines are also offered to it (--duplicate_stdout_filters).
  std::shared_ptr<const DuplicateLog> duplicate;
};

/// One stream of one worker. Console writes are one write() per chunk of whole lines, so lines
/// of different workers never interleave mid-line.
class StreamOutput {
 public:
  StreamOutput(StreamRoute route, std::size_t tail_lines);
  StreamOutput(const StreamOutput&) = delete;
  StreamOutput& operator=(const StreamOutput&) = delete;
  ~StreamOutput();  ///< Closes the log file.
  void on_data(std::string_view data);
  void on_eof();
  /// Whether an unfinished line is held (the agent then arms the kPartialLineIdle timer).
  bool has_partial() const { return splitter_.has_partial(); }
  /// Shows the unfinished line now, tagged like a line and without a newline. Its rest, when it
  /// comes, goes on from there untagged if nothing else was written to the console since;
  /// otherwise it is tagged again as a line of its own. A '\r' inside a line (a progress bar
  /// redrawing itself) is followed by the tag again, so the redrawn line keeps it.
  void flush_partial();
  const LineTail& tail() const { return tail_; }

 private:
  void emit(std::string_view line, bool newline = true);
  void write_pending();
  StreamRoute route_;
  LineSplitter splitter_;
  LineTail tail_;
  std::string pending_;
  bool mid_line_ = false;  // The last console text of this stream had no newline.
};

}  // namespace mlrun
