#include "worker/output.h"

#include <limits.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <mutex>

#include <fmt/format.h>

namespace mlrun {

void LineSplitter::feed(std::string_view data,
                        const std::function<void(std::string_view)>& on_line) {
  while (!data.empty()) {
    auto newline = data.find('\n');
    if (newline == std::string_view::npos) {
      // Cap the unfinished line: a worker printing without newlines must not grow us forever.
      while (partial_.size() + data.size() >= kMaxLineBytes) {
        std::size_t take = kMaxLineBytes - partial_.size();
        partial_.append(data.substr(0, take));
        on_line(partial_);
        partial_.clear();
        data.remove_prefix(take);
      }
      partial_.append(data);
      return;
    }
    if (partial_.empty()) {
      on_line(data.substr(0, newline));
    } else {
      partial_.append(data.substr(0, newline));
      on_line(partial_);
      partial_.clear();
    }
    data.remove_prefix(newline + 1);
  }
}

void LineSplitter::finish(const std::function<void(std::string_view)>& on_line) {
  if (!partial_.empty()) {
    on_line(partial_);
    partial_.clear();
  }
}

void LineTail::push(std::string_view line) {
  if (capacity_ == 0) return;
  if (lines_.size() == capacity_) lines_.pop_front();
  if (line.size() <= kTailLineBytes) {
    lines_.emplace_back(line);
    return;
  }
  // One line of a megabyte would otherwise be the whole summary.
  lines_.push_back(fmt::format("{}... ({} bytes more)", line.substr(0, kTailLineBytes),
                               line.size() - kTailLineBytes));
}

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

namespace {

// A console that stopped taking output: what was dropped since, for the note when it resumes.
// Its lock serialises this process's writes to it: an agent's loop (its workers' lines) and its
// relay (the lines of the agents it started) write to one stdout, as do a head's relay and its
// own node's loop, and a chunk cut by the other thread's write would cut its lines.
struct ConsoleState {
  std::mutex lock;
  bool stalled = false;
  std::size_t dropped_lines = 0;
};
ConsoleState& console_state(int fd) {
  static ConsoleState states[3], other;
  return fd >= 0 && fd < 3 ? states[fd] : other;
}
std::atomic<std::size_t> total_dropped{0};
std::atomic<long> stall_ms{kConsoleStall.count()};

// The next write of data: at most PIPE_BUF bytes, which a pipe takes whole and never
// interleaves with another process's write, and up to the last whole line among them (a longer
// line is cut).
std::size_t next_piece(std::string_view data) {
  if (data.size() <= PIPE_BUF) return data.size();
  std::size_t last = data.rfind('\n', PIPE_BUF - 1);
  return last == std::string_view::npos ? PIPE_BUF : last + 1;
}

bool console_write_locked(ConsoleState& st, int fd, std::string_view data) {
  using std::chrono::steady_clock;
  // Once stalled, a console gets no more waiting until it takes bytes again.
  auto deadline =
      steady_clock::now() + (st.stalled ? std::chrono::milliseconds(0) : console_stall());
  while (!data.empty()) {
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - steady_clock::now());
    pollfd p{fd, POLLOUT, 0};
    int r = poll(&p, 1, static_cast<int>(std::max<long>(0, left.count())));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0 || (p.revents & (POLLERR | POLLNVAL)) != 0) return false;
    if (r == 0) {
      std::size_t lines = static_cast<std::size_t>(std::count(data.begin(), data.end(), '\n'));
      st.stalled = true;
      st.dropped_lines += std::max<std::size_t>(lines, 1);
      total_dropped += std::max<std::size_t>(lines, 1);
      return true;
    }
    if (st.stalled) {
      st.stalled = false;
      std::string note =
          fmt::format("mlrun: {} lines of output dropped here: nothing read them for {} ms\n",
                      st.dropped_lines, console_stall().count());
      st.dropped_lines = 0;
      if (!console_write_locked(st, fd, note)) return false;
    }
    // At most PIPE_BUF after POLLOUT: a pipe that reports room takes that much without blocking.
    ssize_t n = write(fd, data.data(), next_piece(data));
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return false;
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

}  // namespace

void set_console_stall(std::chrono::milliseconds stall) {
  stall_ms = stall.count();
}

std::chrono::milliseconds console_stall() {
  return std::chrono::milliseconds(stall_ms.load());
}

namespace {
std::atomic<const void*> mid_line_owner{nullptr};
}  // namespace

bool console_write(int fd, std::string_view data, const void* leaves_unfinished) {
  ConsoleState& st = console_state(fd);
  std::lock_guard hold(st.lock);
  bool ok = console_write_locked(st, fd, data);
  mid_line_owner = leaves_unfinished;
  return ok;
}

const void* console_mid_line_owner() {
  return mid_line_owner;
}

void console_line_ended() {
  mid_line_owner = nullptr;
}

std::size_t console_dropped_lines() {
  return total_dropped;
}

DuplicateLog::~DuplicateLog() {
  if (fd_ >= 0) close(fd_);
}

void DuplicateLog::offer(std::string_view prefix, std::string_view line) const {
  if (fd_ < 0) return;
  for (const auto& needle : needles_) {
    if (line.find(needle) != std::string_view::npos) {
      write_all(fd_, fmt::format("{}{}\n", prefix, line));  // O_APPEND: whole lines
      return;
    }
  }
}

StreamOutput::StreamOutput(StreamRoute route, std::size_t tail_lines)
    : route_(std::move(route)), tail_(route_.keep_tail ? tail_lines : 0) {}

StreamOutput::~StreamOutput() {
  if (route_.file_fd >= 0) close(route_.file_fd);
}

void StreamOutput::emit(std::string_view line, bool newline) {
  tail_.push(line);
  if (route_.duplicate && newline) route_.duplicate->offer(route_.prefix, line);
  if (route_.console_fd < 0) return;
  if (route_.retag) {
    pending_.append(route_.retag(line));
  } else {
    // Going on with the line this stream left unfinished on the console (flush_partial), where
    // nothing came between: no tag in the middle of it. A '\r' redraws: the tag comes after it
    // (so not before a line that starts with one), unless it ends the line ("\r\n").
    bool goes_on = pending_.empty() && console_mid_line_owner() == this;
    if (!goes_on && !(line.starts_with('\r') && line.size() > 1)) pending_.append(route_.prefix);
    for (std::size_t at = 0; at < line.size();) {
      std::size_t cr = line.find('\r', at);
      if (cr == std::string_view::npos || cr + 1 == line.size() || route_.prefix.empty()) {
        pending_.append(line.substr(at));
        break;
      }
      pending_.append(line.substr(at, cr + 1 - at));
      pending_.append(route_.prefix);
      at = cr + 1;
    }
  }
  mid_line_ = !newline;
  if (newline) pending_.push_back('\n');
}

void StreamOutput::write_pending() {
  if (pending_.empty()) return;
  if (!console_write(route_.console_fd, pending_, mid_line_ ? this : nullptr)) {
    route_.console_fd = -1;
  }
  pending_.clear();
}

void StreamOutput::on_data(std::string_view data) {
  if (route_.file_fd >= 0 && !write_all(route_.file_fd, data)) {
    close(route_.file_fd);
    route_.file_fd = -1;
  }
  splitter_.feed(data, [this](std::string_view line) { emit(line); });
  write_pending();
}

void StreamOutput::on_eof() {
  splitter_.finish([this](std::string_view line) { emit(line); });
  write_pending();
}

void StreamOutput::flush_partial() {
  splitter_.finish([this](std::string_view line) { emit(line, /*newline=*/false); });
  write_pending();
}

}  // namespace mlrun
