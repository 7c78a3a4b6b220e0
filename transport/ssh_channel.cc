// Running one command on an SSH session: the pump that copies the channel's output to fds until
// the command ends, SshSession::run, and RemoteCommand (a pump on its own thread).
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>

#include <fmt/format.h>
#include <libssh/callbacks.h>
#include <libssh/libssh.h>

#include "transport/ssh_session.h"
#include "transport/ssh_session_impl.h"
#include "worker/signals.h"

namespace mlrun {

namespace {

// A pump stops reading the channel while this much output waits for its reader: SSH's window
// then holds the remote command back instead of the head's memory growing.
constexpr size_t kMaxPendingOutput = 1 << 20;
// The pump's poll() wakes at least this often to re-check the session (belt and braces: every
// state change should also make an fd readable).
constexpr int kPumpPollMs = 1000;

// One stream's bytes on their way from the channel to an fd.
struct Sink {
  int fd = -1;
  std::string pending;
  bool broken = false;  // the reader went away: drop further bytes

  // Writes what the fd takes now.
  void flush() {
    while (!pending.empty() && !broken) {
      ssize_t n = ::write(fd, pending.data(), pending.size());
      if (n > 0) {
        pending.erase(0, static_cast<size_t>(n));
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        return;
      } else {
        broken = true;
        pending.clear();
      }
    }
  }
  void add(const void* data, uint32_t len) {
    if (!broken) pending.append(static_cast<const char*>(data), len);
  }
};

struct ChannelState {
  Sink out, err;
  bool exited = false;
  int exit_code = -1;
  std::string signal;

  void flush() {
    out.flush();
    err.flush();
  }
  size_t pending() const { return out.pending.size() + err.pending.size(); }
};

int on_channel_data(ssh_session, ssh_channel, void* data, uint32_t len, int is_stderr,
                    void* userdata) {
  auto* st = static_cast<ChannelState*>(userdata);
  (is_stderr ? st->err : st->out).add(data, len);
  return static_cast<int>(len);  // all consumed: libssh grows the window again
}

void on_exit_status(ssh_session, ssh_channel, int status, void* userdata) {
  auto* st = static_cast<ChannelState*>(userdata);
  st->exited = true;
  st->exit_code = status;
}

void on_exit_signal(ssh_session, ssh_channel, const char* signal, int, const char*, const char*,
                    void* userdata) {
  auto* st = static_cast<ChannelState*>(userdata);
  st->exited = true;
  st->signal = signal != nullptr ? signal : "?";
}

enum class Control : char { kWriteStdin = 'w', kCloseStdin = 'e', kStop = 's' };

}  // namespace

// What other threads want written to a command's stdin (RemoteCommand::write_stdin); the pump
// takes it when a kWriteStdin byte arrives. Named, not anonymous: RemoteCommand::State holds
// one, and in a unity build GCC warns of such a field (-Wsubobject-linkage).
namespace channel_detail {

struct StdinQueue {
  std::mutex mutex;
  std::string data;

  std::string take() {
    std::lock_guard lock(mutex);
    return std::exchange(data, {});
  }
};

}  // namespace channel_detail

using channel_detail::StdinQueue;

namespace {

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// A pipe whose ends are both close-on-exec and non-blocking.
std::pair<int, int> make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    throw std::system_error(errno, std::generic_category(), "pipe2");
  }
  return {fds[0], fds[1]};
}

struct ChannelGuard {
  ssh_channel channel = nullptr;
  ~ChannelGuard() {
    if (channel != nullptr) {
      if (ssh_channel_is_open(channel)) ssh_channel_close(channel);
      ssh_channel_free(channel);
    }
  }
};

struct EventGuard {
  ssh_event event = nullptr;
  ssh_session session = nullptr;
  ~EventGuard() {
    if (event == nullptr) return;
    if (session != nullptr) ssh_event_remove_session(event, session);
    ssh_event_free(event);
  }
};

// Runs command on the session and copies its output to out_fd / err_fd until it ends.
// control_fd (or -1) carries Control bytes from other threads, input (or nullptr) what they
// write to stdin; stopped tells a stop from a lost connection. Run it on a thread with SIGPIPE
// blocked (pump_thread), so that a reader that went away is an EPIPE here.
class Pump {
 public:
  Pump(SshSession::Impl& s, int out_fd, int err_fd, int control_fd, StdinQueue* input,
       const std::atomic<bool>* stopped)
      : s_(s), control_fd_(control_fd), input_(input), stopped_(stopped) {
    st_.out.fd = out_fd;
    st_.err.fd = err_fd;
  }

  RemoteExit run(const std::string& command, std::string_view stdin_data, bool keep_stdin_open) {
    ssh_detail::quiet_libssh();
    // Each step returns false with result_ holding why the command did not run to its end.
    if (!start(command) || !send_stdin(stdin_data, keep_stdin_open) || !watch() || !copy()) {
      return result_;
    }
    return finish();
  }

 private:
  bool fail(SshError::Kind kind, std::string message) {
    result_.error = std::move(message);
    result_.error_kind = kind;
    return false;
  }
  bool is_stopped() const { return stopped_ != nullptr && stopped_->load(); }
  bool lost() {
    if (is_stopped()) return fail(SshError::Kind::kLost, "stopped by the launcher");
    return fail(
        SshError::Kind::kLost,
        fmt::format("connection to {} lost while the command ran: {}", s_.where(), s_.error()));
  }

  // Opens a session channel with the callbacks that fill st_, and runs command on it.
  bool start(const std::string& command) {
    ssh_callbacks_init(&callbacks_);
    callbacks_.userdata = &st_;
    callbacks_.channel_data_function = on_channel_data;
    callbacks_.channel_exit_status_function = on_exit_status;
    callbacks_.channel_exit_signal_function = on_exit_signal;
    channel_.channel = ssh_channel_new(s_.session);
    ssh_channel channel = channel_.channel;
    if (channel == nullptr) return fail(SshError::Kind::kChannel, "cannot create a channel");
    if (ssh_channel_open_session(channel) != SSH_OK) {
      return fail(is_stopped() ? SshError::Kind::kLost : SshError::Kind::kChannel,
                  is_stopped() ? "stopped before the command started"
                               : fmt::format("cannot open a session channel: {}", s_.error()));
    }
    ssh_set_channel_callbacks(channel, &callbacks_);
    if (ssh_channel_request_exec(channel, command.c_str()) != SSH_OK) {
      return fail(is_stopped() ? SshError::Kind::kLost : SshError::Kind::kChannel,
                  is_stopped() ? "stopped before the command started"
                               : fmt::format("cannot run the command: {}", s_.error()));
    }
    return true;
  }

  bool send_stdin(std::string_view data, bool keep_open) {
    // The payload is small (a token and an environment): the initial window takes it whole.
    for (size_t done = 0; done < data.size();) {
      int n = ssh_channel_write(channel_.channel, data.data() + done,
                                static_cast<uint32_t>(data.size() - done));
      if (n == SSH_ERROR) {
        return fail(SshError::Kind::kLost,
                    is_stopped() ? "stopped" : fmt::format("cannot write stdin: {}", s_.error()));
      }
      done += static_cast<size_t>(n);
    }
    if (!keep_open) {
      ssh_channel_send_eof(channel_.channel);
      stdin_open_ = false;
    }
    return true;
  }

  // A libssh event on the session, which processes what its socket has.
  bool watch() {
    event_.event = ssh_event_new();
    if (event_.event == nullptr || ssh_event_add_session(event_.event, s_.session) != SSH_OK) {
      return fail(SshError::Kind::kChannel, "cannot create a libssh event");
    }
    event_.session = s_.session;
    return true;
  }

  // Copies output until the channel has ended and every byte reached its reader.
  bool copy() {
    for (;;) {
      if (!read_control()) return false;
      if (is_stopped()) return fail(SshError::Kind::kLost, "stopped by the launcher");
      st_.flush();
      if (st_.pending() < kMaxPendingOutput) {
        // Processes whatever the socket has: data, exit status and close arrive via callbacks.
        ssh_event_dopoll(event_.event, 0);
        st_.flush();
      }
      const bool drained = st_.pending() == 0;
      const bool closed = ssh_channel_is_closed(channel_.channel) != 0;
      const bool eof = closed || ssh_channel_is_eof(channel_.channel) != 0;
      if (drained && eof && (st_.exited || closed)) return true;
      if (ssh_is_connected(s_.session) == 0 || ssh_get_fd(s_.session) < 0) return lost();
      if (!wait_for_fds()) return false;
    }
  }

  // Takes the Control bytes other threads wrote, in order (a stop is seen through stopped_).
  // False, with result_ set, when stdin could not be written.
  bool read_control() {
    if (control_fd_ < 0) return true;
    char buf[64];
    ssize_t n;
    while ((n = ::read(control_fd_, buf, sizeof buf)) > 0) {
      for (ssize_t i = 0; i < n; ++i) {
        if (!stdin_open_) break;
        if (buf[i] == static_cast<char>(Control::kWriteStdin) && input_ != nullptr) {
          if (!send_stdin(input_->take(), /*keep_open=*/true)) return false;
        } else if (buf[i] == static_cast<char>(Control::kCloseStdin)) {
          ssh_channel_send_eof(channel_.channel);
          stdin_open_ = false;
        }
      }
    }
    return true;
  }

  // Sleeps until the session, a reader or the control fd can move, or kPumpPollMs.
  bool wait_for_fds() {
    pollfd fds[4];
    nfds_t nfds = 0;
    if (control_fd_ >= 0) fds[nfds++] = {control_fd_, POLLIN, 0};
    if (st_.pending() < kMaxPendingOutput) fds[nfds++] = {ssh_get_fd(s_.session), POLLIN, 0};
    if (!st_.out.pending.empty()) fds[nfds++] = {st_.out.fd, POLLOUT, 0};
    if (!st_.err.pending.empty()) fds[nfds++] = {st_.err.fd, POLLOUT, 0};
    if (::poll(fds, nfds, kPumpPollMs) < 0 && errno != EINTR) {
      return fail(SshError::Kind::kLost, fmt::format("poll: {}", std::strerror(errno)));
    }
    return true;
  }

  // The channel has ended: its exit status or signal, or why there is none.
  RemoteExit finish() {
    if (!st_.exited) {
      if (is_stopped()) {
        fail(SshError::Kind::kLost, "stopped by the launcher");
        return result_;
      }
      // A broken connection also marks its channels closed: tell that from a clean close.
      if (ssh_is_connected(s_.session) == 0 ||
          (ssh_get_status(s_.session) & (SSH_CLOSED | SSH_CLOSED_ERROR)) != 0) {
        lost();
        return result_;
      }
      fail(SshError::Kind::kLost,
           fmt::format("{} closed the channel without an exit status", s_.where()));
      return result_;
    }
    result_.exit_code = st_.signal.empty() ? st_.exit_code : -1;
    result_.signal = st_.signal;
    return result_;
  }

  SshSession::Impl& s_;
  const int control_fd_;
  StdinQueue* const input_;
  const std::atomic<bool>* const stopped_;
  // Declared before the channel and the event, which point at them: they outlive both.
  ChannelState st_;
  ssh_channel_callbacks_struct callbacks_{};
  ChannelGuard channel_;
  EventGuard event_;  // destroyed first: the event leaves the session before the channel goes
  bool stdin_open_ = true;
  RemoteExit result_;
};

// The fds and the other threads' controls a pump copies between.
struct PumpEnds {
  int out_fd = -1;
  int err_fd = -1;
  int control_fd = -1;
  StdinQueue* input = nullptr;
  const std::atomic<bool>* stopped = nullptr;
};

RemoteExit pump(SshSession::Impl& s, const std::string& command, std::string_view stdin_data,
                bool keep_stdin_open, const PumpEnds& e) {
  return Pump(s, e.out_fd, e.err_fd, e.control_fd, e.input, e.stopped)
      .run(command, stdin_data, keep_stdin_open);
}

// Runs fn on a fresh thread with every asynchronous signal blocked. SIGPIPE: a reader closing
// its pipe end shows up as EPIPE in the pump and never as a signal to the process (the thread's
// pending SIGPIPE dies with it). The others (SIGINT, SIGTERM, SIGUSR1, ...): a pump may start
// before its process has set up its own signal handling (the head starts each agent as soon as
// its host is connected, docs/multinode.md), and a signal taken here with its default action
// would end the process at once; blocked here, it goes to a thread that handles it.
template <typename Fn>
std::thread pump_thread(Fn fn) {
  return thread_without_signals(std::move(fn));
}

}  // namespace

RemoteExit SshSession::run(const std::string& command, std::string_view stdin_data, int stdout_fd,
                           int stderr_fd) {
  RemoteExit result;
  std::thread t = pump_thread([&] {
    result = pump(*impl_, command, stdin_data, /*keep_stdin_open=*/false,
                  PumpEnds{stdout_fd, stderr_fd});
  });
  t.join();
  return result;
}

// ---------------------------------------------------------------------------------------------
// RemoteCommand

struct RemoteCommand::State {
  std::string host;
  std::string local_address;
  std::unique_ptr<SshSession::Impl> session;
  StdinQueue input;
  int stdout_r = -1, stdout_w = -1;
  int stderr_r = -1, stderr_w = -1;
  int done_r = -1, done_w = -1;
  int control_r = -1, control_w = -1;
  std::atomic<bool> stopped{false};
  std::thread thread;
  RemoteExit result;

  ~State() {
    for (int* fd :
         {&stdout_r, &stdout_w, &stderr_r, &stderr_w, &done_r, &done_w, &control_r, &control_w}) {
      close_fd(*fd);
    }
  }
};

RemoteCommand::RemoteCommand(std::unique_ptr<State> state) : state_(std::move(state)) {}
RemoteCommand::RemoteCommand(RemoteCommand&&) noexcept = default;
RemoteCommand& RemoteCommand::operator=(RemoteCommand&& other) noexcept {
  if (this != &other) {
    if (state_) {
      stop();
      wait();
    }
    state_ = std::move(other.state_);
  }
  return *this;
}
RemoteCommand::~RemoteCommand() {
  if (state_) {
    stop();
    wait();
  }
}

RemoteCommand RemoteCommand::start(SshSession session, std::string command,
                                   std::string stdin_data) {
  auto st = std::make_unique<State>();
  st->host = session.host();
  st->local_address = session.local_address();
  st->session = std::move(session.impl_);
  std::tie(st->stdout_r, st->stdout_w) = make_pipe();
  std::tie(st->stderr_r, st->stderr_w) = make_pipe();
  std::tie(st->done_r, st->done_w) = make_pipe();
  std::tie(st->control_r, st->control_w) = make_pipe();
  State* raw = st.get();
  RemoteCommand started(std::move(st));
  // stdin_data goes the way of every later write_stdin: the pump sends it once the command runs.
  if (!stdin_data.empty()) started.write_stdin(std::move(stdin_data));
  raw->thread = pump_thread([raw, command = std::move(command)]() mutable {
    raw->result =
        pump(*raw->session, command, "", /*keep_stdin_open=*/true,
             PumpEnds{raw->stdout_w, raw->stderr_w, raw->control_r, &raw->input, &raw->stopped});
    // Disconnect now, not when the object dies: the remote side sees the session end.
    raw->session->disconnect();
    close_fd(raw->stdout_w);
    close_fd(raw->stderr_w);
    close_fd(raw->done_w);  // done_r reads EOF from here on: readable for good
  });
  return started;
}

const std::string& RemoteCommand::host() const {
  return state_->host;
}
const std::string& RemoteCommand::local_address() const {
  return state_->local_address;
}
int RemoteCommand::stdout_fd() const {
  return state_->stdout_r;
}
int RemoteCommand::stderr_fd() const {
  return state_->stderr_r;
}
int RemoteCommand::done_fd() const {
  return state_->done_r;
}

void RemoteCommand::write_stdin(std::string data) {
  {
    std::lock_guard lock(state_->input.mutex);
    state_->input.data += data;
  }
  char c = static_cast<char>(Control::kWriteStdin);
  [[maybe_unused]] ssize_t n = ::write(state_->control_w, &c, 1);
}

void RemoteCommand::close_stdin() {
  char c = static_cast<char>(Control::kCloseStdin);
  [[maybe_unused]] ssize_t n = ::write(state_->control_w, &c, 1);
}

void RemoteCommand::stop() {
  if (state_->stopped.exchange(true)) return;
  char c = static_cast<char>(Control::kStop);
  [[maybe_unused]] ssize_t n = ::write(state_->control_w, &c, 1);
  // Breaks a pump blocked inside libssh (opening the channel, writing stdin) at once; the
  // remote sshd sees the connection end and closes the command's stdin.
  if (auto* s = state_->session.get()) {
    std::lock_guard lock(s->fd_mutex);
    if (s->socket_fd >= 0) ::shutdown(s->socket_fd, SHUT_RDWR);
  }
}

RemoteExit RemoteCommand::wait() {
  if (state_->thread.joinable()) state_->thread.join();
  return state_->result;
}

}  // namespace mlrun
