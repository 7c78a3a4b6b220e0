#include "worker/output.h"

#include <unistd.h>

#include <cerrno>

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
  lines_.emplace_back(line);
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

StreamOutput::StreamOutput(StreamRoute route, std::size_t tail_lines)
    : route_(std::move(route)), tail_(route_.keep_tail ? tail_lines : 0) {}

StreamOutput::~StreamOutput() {
  if (route_.file_fd >= 0) close(route_.file_fd);
}

void StreamOutput::emit(std::string_view line, bool newline) {
  tail_.push(line);
  if (route_.console_fd < 0) return;
  if (route_.retag) {
    pending_.append(route_.retag(line));
  } else {
    pending_.append(route_.prefix);
    pending_.append(line);
  }
  if (newline) pending_.push_back('\n');
}

void StreamOutput::write_pending() {
  if (pending_.empty()) return;
  if (!write_all(route_.console_fd, pending_)) route_.console_fd = -1;
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
