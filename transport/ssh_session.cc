#include "transport/ssh_session.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include <fmt/format.h>
#include <libssh/callbacks.h>
#include <libssh/libssh.h>

#include "worker/log.h"

namespace mlrun {
namespace {

// A pump stops reading the channel while this much output waits for its reader: SSH's window
// then holds the remote command back instead of the head's memory growing.
constexpr size_t kMaxPendingOutput = 1 << 20;
// connect_all never runs more connection threads than this at once.
constexpr size_t kMaxConnectThreads = 256;
// The pump's poll() wakes at least this often to re-check the session (belt and braces: every
// state change should also make an fd readable).
constexpr int kPumpPollMs = 1000;

void discard_libssh_log(int, const char*, const char*, void*) {}

// libssh's log level and log callback are thread-local, so every thread that calls into libssh
// installs the no-op callback: nothing libssh says may reach the user's terminal, whatever
// LogLevel ~/.ssh/config sets.
void quiet_libssh() {
  thread_local bool quiet = false;
  if (!quiet) {
    ssh_set_log_callback(discard_libssh_log);
    ssh_set_log_level(SSH_LOG_NOLOG);
    quiet = true;
  }
}

// libssh asks for key passphrases through this; mlrun never prompts. Without it libssh would
// fall back to OpenSSL's terminal prompt for PEM keys.
int refuse_passphrase(const char*, char*, size_t, int, int, void*) {
  return -1;
}

std::string home_dir() {
  // $HOME first (as most tools do, and so tests can point at a fake home); libssh alone would
  // take the passwd entry.
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') return home;
  if (const passwd* pw = getpwuid(getuid()); pw != nullptr && pw->pw_dir != nullptr) {
    return pw->pw_dir;
  }
  return "/";
}

int signal_number(const std::string& name) {
  static const std::pair<const char*, int> kSignals[] = {
      {"HUP", SIGHUP},   {"INT", SIGINT},   {"QUIT", SIGQUIT}, {"ILL", SIGILL},   {"TRAP", SIGTRAP},
      {"ABRT", SIGABRT}, {"BUS", SIGBUS},   {"FPE", SIGFPE},   {"KILL", SIGKILL}, {"USR1", SIGUSR1},
      {"SEGV", SIGSEGV}, {"USR2", SIGUSR2}, {"PIPE", SIGPIPE}, {"ALRM", SIGALRM}, {"TERM", SIGTERM},
      {"XCPU", SIGXCPU}, {"XFSZ", SIGXFSZ}, {"SYS", SIGSYS}};
  for (const auto& [n, sig] : kSignals) {
    if (name == n) return sig;
  }
  return 0;
}

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

}  // namespace

SshError::SshError(Kind kind, std::string host, const std::string& message)
    : std::runtime_error(host + ": " + message), kind_(kind), host_(std::move(host)) {}

int RemoteExit::status() const {
  if (!signal.empty()) {
    int sig = signal_number(signal);
    return sig > 0 ? 128 + sig : 255;
  }
  if (error.empty() && exit_code >= 0) return exit_code;
  return 255;
}

// ---------------------------------------------------------------------------------------------
// Session

struct SshSession::Impl {
  std::string host;     // as the user wrote it
  std::string address;  // after ~/.ssh/config's HostName
  int port = 22;
  std::string user;
  std::string ssh_dir;
  ssh_session session = nullptr;
  ssh_callbacks_struct callbacks{};
  // The socket, published for RemoteCommand::stop(), which shuts it down from another thread
  // to break any blocking libssh call. Guarded by fd_mutex; -1 once the session is gone.
  std::mutex fd_mutex;
  int socket_fd = -1;

  Impl() = default;
  Impl(const Impl&) = delete;
  ~Impl() {
    if (session != nullptr) {
      disconnect();
      ssh_free(session);
    }
  }

  // Ends the connection; the session stays allocated (its error text stays readable).
  void disconnect() {
    {
      std::lock_guard lock(fd_mutex);
      socket_fd = -1;
    }
    quiet_libssh();
    ssh_disconnect(session);
  }

  std::string error() const { return session ? ssh_get_error(session) : "no session"; }
  std::string where() const { return port == 22 ? address : fmt::format("{}:{}", address, port); }
  // How known_hosts and ssh-keygen -R name this host.
  std::string known_hosts_name() const {
    return port == 22 ? address : fmt::format("[{}]:{}", address, port);
  }
  SshError fail(SshError::Kind kind, const std::string& message) const {
    return SshError(kind, host, message);
  }
};

namespace {

std::string server_key_description(SshSession::Impl& s) {
  ssh_key key = nullptr;
  if (ssh_get_server_publickey(s.session, &key) != SSH_OK) return "its key";
  unsigned char* hash = nullptr;
  size_t hash_len = 0;
  std::string text = fmt::format("its {} key", ssh_key_type_to_char(ssh_key_type(key)));
  if (ssh_get_publickey_hash(key, SSH_PUBLICKEY_HASH_SHA256, &hash, &hash_len) == SSH_OK) {
    char* fp = ssh_get_fingerprint_hash(SSH_PUBLICKEY_HASH_SHA256, hash, hash_len);
    if (fp != nullptr) {
      text += fmt::format(" {}", fp);
      ssh_string_free_char(fp);
    }
    ssh_clean_pubkey_hash(&hash);
  }
  ssh_key_free(key);
  return text;
}

// Known-hosts policy: only a key already in known_hosts is accepted; mlrun never adds one.
void check_host_key(SshSession::Impl& s) {
  const std::string known_hosts = s.ssh_dir + "/known_hosts";
  const std::string keyscan =
      fmt::format("ssh-keyscan {}{} >> ~/.ssh/known_hosts",
                  s.port == 22 ? "" : fmt::format("-p {} ", s.port), s.address);
  switch (ssh_session_is_known_server(s.session)) {
    case SSH_KNOWN_HOSTS_OK:
      return;
    case SSH_KNOWN_HOSTS_UNKNOWN:
    case SSH_KNOWN_HOSTS_NOT_FOUND:
      throw s.fail(SshError::Kind::kHostKeyUnknown,
                   fmt::format("host key unknown: {} is not in {} ({}); mlrun never accepts a "
                               "new host key by itself: check the fingerprint, then add it with "
                               "`{}` or by connecting once with `ssh {}`",
                               s.known_hosts_name(), known_hosts, server_key_description(s),
                               keyscan, s.host));
    case SSH_KNOWN_HOSTS_CHANGED:
      throw s.fail(SshError::Kind::kHostKeyChanged,
                   fmt::format("HOST KEY CHANGED: {} now offers {}, which differs from the key "
                               "for it in {} (someone may be intercepting the connection, or the "
                               "host was reinstalled); if you know why it changed, remove the "
                               "old key with `ssh-keygen -R {}` and add the new one with `{}`",
                               s.known_hosts_name(), server_key_description(s), known_hosts,
                               s.known_hosts_name(), keyscan));
    case SSH_KNOWN_HOSTS_OTHER:
      throw s.fail(SshError::Kind::kHostKeyChanged,
                   fmt::format("host key changed type: {} holds a key of another type for {}, "
                               "which now offers {}; if you know why it changed, remove the old "
                               "key with `ssh-keygen -R {}` and add the new one with `{}`",
                               known_hosts, s.known_hosts_name(), server_key_description(s),
                               s.known_hosts_name(), keyscan));
    case SSH_KNOWN_HOSTS_ERROR:
    default:
      throw s.fail(SshError::Kind::kConfig,
                   fmt::format("cannot check the host key against {}: {}", known_hosts, s.error()));
  }
}

SshError connect_error(SshSession::Impl& s, const SshOptions& options) {
  std::string cause = s.error();
  if (cause.find("Timeout") != std::string::npos || cause.find("timed out") != std::string::npos) {
    return s.fail(SshError::Kind::kTimeout,
                  fmt::format("no SSH answer from {} within {} ms (host down, or a firewall "
                              "dropping port {}?)",
                              s.where(), options.connect_timeout.count(), s.port));
  }
  if (cause.find("resolve") != std::string::npos) {
    return s.fail(SshError::Kind::kConnect,
                  fmt::format("cannot resolve the host name: {} (check the name, or add a Host "
                              "entry with HostName to ~/.ssh/config)",
                              cause));
  }
  return s.fail(SshError::Kind::kConnect,
                fmt::format("cannot connect to {}: {} (is sshd running there, on port {}?)",
                            s.where(), cause, s.port));
}

// A session can sit silent for hours while the remote agent supervises its workers; without
// keepalive, a host that vanished would leave the pump waiting forever.
void set_keepalive(int fd, std::chrono::seconds idle) {
  int on = 1;
  int idle_s = static_cast<int>(idle.count());
  int interval_s = std::max(1, idle_s / 2);
  int count = 3;
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof on);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle_s, sizeof idle_s);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval_s, sizeof interval_s);
  setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof count);
}

void set_option(SshSession::Impl& s, ssh_options_e option, const void* value, const char* what) {
  if (ssh_options_set(s.session, option, value) != SSH_OK) {
    throw s.fail(SshError::Kind::kConfig, fmt::format("cannot set {}: {}", what, s.error()));
  }
}

}  // namespace

SshSession::SshSession(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SshSession::SshSession(SshSession&&) noexcept = default;
SshSession& SshSession::operator=(SshSession&&) noexcept = default;
SshSession::~SshSession() = default;

const std::string& SshSession::host() const {
  return impl_->host;
}

std::string SshSession::local_address() const {
  sockaddr_storage local{};
  socklen_t len = sizeof local;
  if (getsockname(impl_->socket_fd, reinterpret_cast<sockaddr*>(&local), &len) != 0) return {};
  char text[INET6_ADDRSTRLEN] = {};
  const void* raw =
      local.ss_family == AF_INET
          ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&local)->sin_addr)
          : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&local)->sin6_addr);
  if (inet_ntop(local.ss_family, raw, text, sizeof text) == nullptr) return {};
  return text;
}

SshSession SshSession::connect(const SshTarget& target, const SshOptions& options) {
  quiet_libssh();
  auto s = std::make_unique<Impl>();
  s->host = target.host;
  s->address = target.host;
  s->session = ssh_new();
  if (s->session == nullptr) throw s->fail(SshError::Kind::kConfig, "ssh_new failed");

  // Options: $HOME/.ssh holds config, known_hosts and the default identities (libssh expands
  // its defaults from SSH_DIR). The host must be set before the config is parsed so that its
  // Host patterns match the name as written.
  s->ssh_dir = home_dir() + "/.ssh";
  set_option(*s, SSH_OPTIONS_SSH_DIR, s->ssh_dir.c_str(), "the SSH directory");
  set_option(*s, SSH_OPTIONS_HOST, target.host.c_str(), "the host name");
  if (ssh_options_parse_config(s->session, nullptr) != SSH_OK) {
    throw s->fail(
        SshError::Kind::kConfig,
        fmt::format("cannot parse {}/config or /etc/ssh/ssh_config: {}", s->ssh_dir, s->error()));
  }
  // After the config, whose LogLevel would re-enable libssh's logging, and whose values the
  // caller's explicit ones override.
  int verbosity = SSH_LOG_NOLOG;
  set_option(*s, SSH_OPTIONS_LOG_VERBOSITY, &verbosity, "the log level");
  if (!target.user.empty()) set_option(*s, SSH_OPTIONS_USER, target.user.c_str(), "the user");
  if (target.port > 0) {
    unsigned int port = static_cast<unsigned int>(target.port);
    set_option(*s, SSH_OPTIONS_PORT, &port, "the port");
  }
  const auto ms = std::max<long>(1, options.connect_timeout.count());
  long seconds = ms / 1000;
  long usec = (ms % 1000) * 1000;
  set_option(*s, SSH_OPTIONS_TIMEOUT, &seconds, "the timeout");
  set_option(*s, SSH_OPTIONS_TIMEOUT_USEC, &usec, "the timeout");
  ssh_callbacks_init(&s->callbacks);
  s->callbacks.auth_function = refuse_passphrase;
  ssh_set_callbacks(s->session, &s->callbacks);
  ssh_set_blocking(s->session, 1);

  char* value = nullptr;
  if (ssh_options_get(s->session, SSH_OPTIONS_HOST, &value) == SSH_OK && value != nullptr) {
    s->address = value;
    ssh_string_free_char(value);
  }
  value = nullptr;
  if (ssh_options_get(s->session, SSH_OPTIONS_USER, &value) == SSH_OK && value != nullptr) {
    s->user = value;
    ssh_string_free_char(value);
  }
  unsigned int port = 22;
  if (ssh_options_get_port(s->session, &port) == SSH_OK) s->port = static_cast<int>(port);

  // Connect (TCP and the SSH handshake, bounded by SSH_OPTIONS_TIMEOUT), then the host key,
  // then public-key authentication only.
  if (ssh_connect(s->session) != SSH_OK) throw connect_error(*s, options);
  {
    std::lock_guard lock(s->fd_mutex);
    s->socket_fd = ssh_get_fd(s->session);
  }
  if (options.keepalive_idle.count() > 0) set_keepalive(s->socket_fd, options.keepalive_idle);
  check_host_key(*s);
  int rc = ssh_userauth_publickey_auto(s->session, nullptr, nullptr);
  if (rc == SSH_AUTH_ERROR) {
    throw s->fail(
        SshError::Kind::kConnect,
        fmt::format("connection to {} failed during authentication: {}", s->where(), s->error()));
  }
  if (rc != SSH_AUTH_SUCCESS) {
    throw s->fail(SshError::Kind::kAuth,
                  fmt::format("permission denied for {}@{}: no key from the SSH agent or {} was "
                              "accepted (mlrun never asks for a password or a key passphrase: load "
                              "such keys into ssh-agent): install your public key there, e.g. "
                              "`ssh-copy-id {}@{}`, or name the key with IdentityFile in "
                              "~/.ssh/config",
                              s->user, s->where(), s->ssh_dir, s->user, target.host));
  }
  return SshSession(std::move(s));
}

std::vector<std::variant<SshSession, SshError>> connect_all(const std::vector<SshTarget>& targets,
                                                            const SshOptions& options) {
  std::vector<std::optional<std::variant<SshSession, SshError>>> slots(targets.size());
  std::atomic<size_t> next{0};
  std::atomic<size_t> connected{0};
  const auto start = std::chrono::steady_clock::now();
  auto work = [&] {
    for (size_t i = next++; i < targets.size(); i = next++) {
      log::debug("ssh {}: connecting", targets[i].host);
      try {
        slots[i].emplace(SshSession::connect(targets[i], options));
        log::info("hosts connected {}/{}: {} in {:.2f} s", ++connected, targets.size(),
                  targets[i].host, log::since(start));
      } catch (const SshError& e) {
        slots[i].emplace(e);
      } catch (const std::exception& e) {
        slots[i].emplace(SshError(SshError::Kind::kConnect, targets[i].host, e.what()));
      }
      if (std::holds_alternative<SshError>(*slots[i])) {
        log::debug("ssh {}: failed after {:.2f} s", targets[i].host, log::since(start));
      }
    }
  };
  std::vector<std::thread> threads;
  const size_t n = std::min(targets.size(), kMaxConnectThreads);
  threads.reserve(n);
  for (size_t t = 0; t < n; ++t) threads.emplace_back(work);
  for (auto& t : threads) t.join();

  std::vector<std::variant<SshSession, SshError>> results;
  results.reserve(targets.size());
  for (auto& slot : slots) results.push_back(std::move(*slot));
  return results;
}

// ---------------------------------------------------------------------------------------------
// Pumping one command's channel

namespace {

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

enum class Control : char { kCloseStdin = 'e', kStop = 's' };

// Runs command on the session and copies its output to out_fd / err_fd until it ends.
// control_fd (or -1) carries Control bytes from other threads; stopped tells a stop from a
// lost connection. Call it on a thread with SIGPIPE blocked (pump_thread), so that a reader
// that went away is an EPIPE here.
RemoteExit pump(SshSession::Impl& s, const std::string& command, std::string_view stdin_data,
                bool keep_stdin_open, int out_fd, int err_fd, int control_fd,
                const std::atomic<bool>* stopped) {
  quiet_libssh();
  RemoteExit result;
  auto fail = [&](SshError::Kind kind, std::string message) {
    result.error = std::move(message);
    result.error_kind = kind;
    return result;
  };
  auto is_stopped = [&] { return stopped != nullptr && stopped->load(); };

  ChannelState st;
  st.out.fd = out_fd;
  st.err.fd = err_fd;
  ssh_channel_callbacks_struct callbacks{};
  ssh_callbacks_init(&callbacks);
  callbacks.userdata = &st;
  callbacks.channel_data_function = on_channel_data;
  callbacks.channel_exit_status_function = on_exit_status;
  callbacks.channel_exit_signal_function = on_exit_signal;

  struct ChannelGuard {
    ssh_channel channel;
    ~ChannelGuard() {
      if (channel != nullptr) {
        if (ssh_channel_is_open(channel)) ssh_channel_close(channel);
        ssh_channel_free(channel);
      }
    }
  } guard{ssh_channel_new(s.session)};
  ssh_channel channel = guard.channel;
  if (channel == nullptr) return fail(SshError::Kind::kChannel, "cannot create a channel");
  if (ssh_channel_open_session(channel) != SSH_OK) {
    return fail(is_stopped() ? SshError::Kind::kLost : SshError::Kind::kChannel,
                is_stopped() ? "stopped before the command started"
                             : fmt::format("cannot open a session channel: {}", s.error()));
  }
  ssh_set_channel_callbacks(channel, &callbacks);
  if (ssh_channel_request_exec(channel, command.c_str()) != SSH_OK) {
    return fail(is_stopped() ? SshError::Kind::kLost : SshError::Kind::kChannel,
                is_stopped() ? "stopped before the command started"
                             : fmt::format("cannot run the command: {}", s.error()));
  }
  // The payload is small (a token and an environment): the initial window takes it whole.
  for (size_t done = 0; done < stdin_data.size();) {
    int n = ssh_channel_write(channel, stdin_data.data() + done,
                              static_cast<uint32_t>(stdin_data.size() - done));
    if (n == SSH_ERROR) {
      return fail(SshError::Kind::kLost,
                  is_stopped() ? "stopped" : fmt::format("cannot write stdin: {}", s.error()));
    }
    done += static_cast<size_t>(n);
  }
  bool stdin_open = true;
  if (!keep_stdin_open) {
    ssh_channel_send_eof(channel);
    stdin_open = false;
  }

  ssh_event event = ssh_event_new();
  if (event == nullptr || ssh_event_add_session(event, s.session) != SSH_OK) {
    if (event != nullptr) ssh_event_free(event);
    return fail(SshError::Kind::kChannel, "cannot create a libssh event");
  }
  struct EventGuard {
    ssh_event event;
    ssh_session session;
    ~EventGuard() {
      ssh_event_remove_session(event, session);
      ssh_event_free(event);
    }
  } event_guard{event, s.session};

  for (;;) {
    if (control_fd >= 0) {
      char buf[64];
      ssize_t n;
      while ((n = ::read(control_fd, buf, sizeof buf)) > 0) {
        for (ssize_t i = 0; i < n; ++i) {
          if (buf[i] == static_cast<char>(Control::kCloseStdin) && stdin_open) {
            ssh_channel_send_eof(channel);
            stdin_open = false;
          }
        }
      }
    }
    if (is_stopped()) return fail(SshError::Kind::kLost, "stopped by the launcher");

    st.out.flush();
    st.err.flush();
    const size_t pending = st.out.pending.size() + st.err.pending.size();
    if (pending < kMaxPendingOutput) {
      // Processes whatever the socket has: data, exit status and close arrive via callbacks.
      ssh_event_dopoll(event, 0);
      st.out.flush();
      st.err.flush();
    }
    const bool drained = st.out.pending.empty() && st.err.pending.empty();
    const bool closed = ssh_channel_is_closed(channel) != 0;
    const bool eof = closed || ssh_channel_is_eof(channel) != 0;
    if (drained && eof && (st.exited || closed)) break;
    if (ssh_is_connected(s.session) == 0 || ssh_get_fd(s.session) < 0) {
      if (is_stopped()) return fail(SshError::Kind::kLost, "stopped by the launcher");
      return fail(
          SshError::Kind::kLost,
          fmt::format("connection to {} lost while the command ran: {}", s.where(), s.error()));
    }

    pollfd fds[4];
    nfds_t nfds = 0;
    if (control_fd >= 0) fds[nfds++] = {control_fd, POLLIN, 0};
    if (st.out.pending.size() + st.err.pending.size() < kMaxPendingOutput) {
      fds[nfds++] = {ssh_get_fd(s.session), POLLIN, 0};
    }
    if (!st.out.pending.empty()) fds[nfds++] = {st.out.fd, POLLOUT, 0};
    if (!st.err.pending.empty()) fds[nfds++] = {st.err.fd, POLLOUT, 0};
    if (::poll(fds, nfds, kPumpPollMs) < 0 && errno != EINTR) {
      return fail(SshError::Kind::kLost, fmt::format("poll: {}", std::strerror(errno)));
    }
  }
  if (!st.exited) {
    if (is_stopped()) return fail(SshError::Kind::kLost, "stopped by the launcher");
    // A broken connection also marks its channels closed: tell that from a clean close.
    if (ssh_is_connected(s.session) == 0 ||
        (ssh_get_status(s.session) & (SSH_CLOSED | SSH_CLOSED_ERROR)) != 0) {
      return fail(
          SshError::Kind::kLost,
          fmt::format("connection to {} lost while the command ran: {}", s.where(), s.error()));
    }
    return fail(SshError::Kind::kLost,
                fmt::format("{} closed the channel without an exit status", s.where()));
  }
  result.exit_code = st.signal.empty() ? st.exit_code : -1;
  result.signal = st.signal;
  return result;
}

// Runs fn on a fresh thread with SIGPIPE blocked, so that a reader closing its pipe end shows
// up as EPIPE in the pump and never as a signal to the process. The thread's pending SIGPIPE
// dies with it.
template <typename Fn>
std::thread pump_thread(Fn fn) {
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &block, &old);  // the new thread inherits this mask
  std::thread t(std::move(fn));
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return t;
}

}  // namespace

RemoteExit SshSession::run(const std::string& command, std::string_view stdin_data, int stdout_fd,
                           int stderr_fd) {
  RemoteExit result;
  std::thread t = pump_thread([&] {
    result = pump(*impl_, command, stdin_data, /*keep_stdin_open=*/false, stdout_fd, stderr_fd,
                  /*control_fd=*/-1, nullptr);
  });
  t.join();
  return result;
}

// ---------------------------------------------------------------------------------------------
// RemoteCommand

struct RemoteCommand::State {
  std::string host;
  std::unique_ptr<SshSession::Impl> session;
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
  st->session = std::move(session.impl_);
  std::tie(st->stdout_r, st->stdout_w) = make_pipe();
  std::tie(st->stderr_r, st->stderr_w) = make_pipe();
  std::tie(st->done_r, st->done_w) = make_pipe();
  std::tie(st->control_r, st->control_w) = make_pipe();
  State* raw = st.get();
  raw->thread = pump_thread(
      [raw, command = std::move(command), stdin_data = std::move(stdin_data)]() mutable {
        raw->result = pump(*raw->session, command, stdin_data, /*keep_stdin_open=*/true,
                           raw->stdout_w, raw->stderr_w, raw->control_r, &raw->stopped);
        // Disconnect now, not when the object dies: the remote side sees the session end.
        raw->session->disconnect();
        close_fd(raw->stdout_w);
        close_fd(raw->stderr_w);
        close_fd(raw->done_w);  // done_r reads EOF from here on: readable for good
      });
  return RemoteCommand(std::move(st));
}

const std::string& RemoteCommand::host() const {
  return state_->host;
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
