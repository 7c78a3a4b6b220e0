#include "worker/stdin.h"

#include <utility>  // Boost 1.74's Asio headers use std::exchange without including it.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include <fmt/format.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>

#include "worker/output.h"

namespace mlrun {

namespace asio = boost::asio;

namespace {

int duplicate(int fd) {
  int copy = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (copy < 0) {
    throw SpawnError(fmt::format("cannot duplicate the terminal: {}", std::strerror(errno)));
  }
  return copy;
}

}  // namespace

struct TerminalForwarder::Impl {
  Impl(asio::io_context& io, int terminal) : io(io), tty(io, duplicate(terminal)), timer(io) {
    // Stopped by SIGTTIN, a launcher moved to the background would stop supervising; with it
    // ignored, its read fails with EIO and it waits for the foreground instead.
    signal(SIGTTIN, SIG_IGN);
    wait_terminal();
  }

  asio::io_context& io;
  asio::posix::stream_descriptor tty;
  asio::steady_timer timer;
  // The write end of the current pipe (non-blocking), and a number that changes with it, so
  // that a handler of a closed pipe knows it.
  std::optional<asio::posix::stream_descriptor> sink;
  std::uint64_t sink_id = 0;
  std::string pending;   // Read from the terminal, not yet taken by the pipe.
  bool ended = false;    // The terminal's end of file (or an error): no more input.
  bool waiting = false;  // A wait on the terminal, the timer or a posted read is outstanding.
  char buffer[kStdinChunk];

  bool foreground() { return tcgetpgrp(tty.native_handle()) == getpgrp(); }

  // Waits until the terminal can be read, in the foreground, unless a read is due already.
  void wait_terminal() {
    if (ended || waiting || !pending.empty()) return;
    waiting = true;
    if (!foreground()) {
      timer.expires_after(kForegroundPoll);
      timer.async_wait([this](const boost::system::error_code& ec) {
        waiting = false;
        if (!ec) wait_terminal();
      });
      return;
    }
    // Asio's epoll registration is edge-triggered: input that came while this launcher was not
    // waiting (in the background, or behind a full pipe) would raise no new edge. Look first.
    pollfd p{tty.native_handle(), POLLIN, 0};
    if (poll(&p, 1, 0) > 0) {
      asio::post(io, [this] {
        waiting = false;
        read_terminal();
      });
      return;
    }
    tty.async_wait(asio::posix::stream_descriptor::wait_read,
                   [this](const boost::system::error_code& ec) {
                     waiting = false;
                     if (!ec) read_terminal();
                   });
  }

  void read_terminal() {
    if (ended) return;
    // Reading from the background would fail (EIO) or stop us; wait for the foreground.
    if (!foreground()) return wait_terminal();
    ssize_t n = ::read(tty.native_handle(), buffer, sizeof buffer);
    if (n > 0) {
      console_line_ended();  // The terminal echoed what was typed at the prompt.
      if (sink) {
        pending.assign(buffer, static_cast<std::size_t>(n));
        write_sink();
      }
      return wait_terminal();
    }
    if (n == 0) return end();
    // EIO: moved to the background between the check and the read.
    if (errno == EINTR || errno == EAGAIN || (errno == EIO && !foreground())) {
      return wait_terminal();
    }
    end();
  }

  // Writes pending into the pipe; what does not fit waits for the pipe to drain, and the
  // terminal is not read meanwhile, so at most one chunk is ever held.
  void write_sink() {
    while (sink && !pending.empty()) {
      ssize_t n = ::write(sink->native_handle(), pending.data(), pending.size());
      if (n > 0) {
        pending.erase(0, static_cast<std::size_t>(n));
      } else if (n < 0 && errno == EAGAIN) {
        sink->async_wait(asio::posix::stream_descriptor::wait_write,
                         [this, id = sink_id](const boost::system::error_code& ec) {
                           if (ec || id != sink_id) return;
                           write_sink();
                           wait_terminal();
                         });
        return;
      } else if (n < 0 && errno != EINTR) {
        // EPIPE: the process is gone (SIGPIPE is ignored by the launcher). Wait for the next.
        close_sink();
      }
    }
  }

  void close_sink() {
    pending.clear();
    if (!sink) return;
    boost::system::error_code ignored;
    sink->close(ignored);
    sink.reset();
    ++sink_id;
  }

  void end() {
    ended = true;
    close_sink();
  }

  int new_pipe() {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) {
      throw SpawnError(fmt::format("cannot create a pipe for stdin: {}", std::strerror(errno)));
    }
    close_sink();
    if (ended) {
      close(fds[1]);
      return fds[0];
    }
    fcntl(fds[1], F_SETFL, O_NONBLOCK);
    sink.emplace(io, fds[1]);
    ++sink_id;
    // Pending input of the previous pipe was dropped: the terminal may be read again.
    wait_terminal();
    return fds[0];
  }
};

TerminalForwarder::TerminalForwarder(asio::io_context& io, int terminal)
    : impl_(std::make_unique<Impl>(io, terminal)) {}

TerminalForwarder::~TerminalForwarder() = default;

int TerminalForwarder::new_pipe() {
  return impl_->new_pipe();
}

namespace {

class TerminalStdinSpawner final : public ProcessSpawner {
 public:
  TerminalStdinSpawner(asio::io_context& io, ProcessSpawner& inner) : io_(io), inner_(inner) {}

  SpawnedProcess spawn(const SpawnRequest& request) override {
    if (request.stdin_fd < 0 || !isatty(request.stdin_fd)) return inner_.spawn(request);
    if (!forwarder_) forwarder_.emplace(io_, request.stdin_fd);
    SpawnRequest piped = request;
    piped.stdin_fd = forwarder_->new_pipe();
    try {
      SpawnedProcess p = inner_.spawn(piped);
      close(piped.stdin_fd);
      return p;
    } catch (...) {
      close(piped.stdin_fd);
      throw;
    }
  }

  void signal_group(pid_t pgid, int sig) override { inner_.signal_group(pgid, sig); }
  void signal_process(pid_t pid, int sig) override { inner_.signal_process(pid, sig); }
  void sweep() override { inner_.sweep(); }

 private:
  asio::io_context& io_;
  ProcessSpawner& inner_;
  std::optional<TerminalForwarder> forwarder_;
};

}  // namespace

std::unique_ptr<ProcessSpawner> make_terminal_stdin_spawner(asio::io_context& io,
                                                            ProcessSpawner& inner) {
  return std::make_unique<TerminalStdinSpawner>(io, inner);
}

}  // namespace mlrun
