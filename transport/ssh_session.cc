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

#include "transport/libssh_lazy.h"
#include "transport/ssh_session_impl.h"
#include "worker/log.h"

namespace mlrun {
namespace {

// connect_all never runs more connection threads than this at once.
constexpr size_t kMaxConnectThreads = 256;

void discard_libssh_log(int, const char*, const char*, void*) {}

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

}  // namespace

namespace ssh_detail {

void quiet_libssh() {
  thread_local bool quiet = false;
  if (!quiet) {
    ssh_set_log_callback(discard_libssh_log);
    ssh_set_log_level(SSH_LOG_NOLOG);
    quiet = true;
  }
}

}  // namespace ssh_detail

using ssh_detail::quiet_libssh;

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
// Session (its state, SshSession::Impl, is in ssh_session_impl.h)

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

std::optional<int> SshSession::socket_option(int level, int name) const {
  int value = 0;
  socklen_t len = sizeof value;
  if (getsockopt(impl_->socket_fd, level, name, &value, &len) != 0) return std::nullopt;
  return value;
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

// libssh is opened at the first connection (transport/libssh_lazy.h); failing, it names the host.
static void open_libssh(const std::string& host) {
  try {
    ssh_detail::load_libssh();
  } catch (const std::runtime_error& e) {
    throw SshError(SshError::Kind::kConfig, host, e.what());
  }
}

// Options: $HOME/.ssh holds config, known_hosts and the default identities (libssh expands
// its defaults from SSH_DIR). The host must be set before the config is parsed so that its Host
// patterns match the name as written.
static void set_session_options(SshSession::Impl& s, const SshTarget& target,
                                const SshOptions& options) {
  s.ssh_dir = home_dir() + "/.ssh";
  set_option(s, SSH_OPTIONS_SSH_DIR, s.ssh_dir.c_str(), "the SSH directory");
  set_option(s, SSH_OPTIONS_HOST, target.host.c_str(), "the host name");
  if (ssh_options_parse_config(s.session, nullptr) != SSH_OK) {
    throw s.fail(
        SshError::Kind::kConfig,
        fmt::format("cannot parse {}/config or /etc/ssh/ssh_config: {}", s.ssh_dir, s.error()));
  }
  // After the config, whose LogLevel would re-enable libssh's logging, and whose values the
  // caller's explicit ones override.
  int verbosity = SSH_LOG_NOLOG;
  set_option(s, SSH_OPTIONS_LOG_VERBOSITY, &verbosity, "the log level");
  if (!target.user.empty()) set_option(s, SSH_OPTIONS_USER, target.user.c_str(), "the user");
  if (target.port > 0) {
    unsigned int port = static_cast<unsigned int>(target.port);
    set_option(s, SSH_OPTIONS_PORT, &port, "the port");
  }
  const auto ms = std::max<long>(1, options.connect_timeout.count());
  long seconds = ms / 1000;
  long usec = (ms % 1000) * 1000;
  set_option(s, SSH_OPTIONS_TIMEOUT, &seconds, "the timeout");
  set_option(s, SSH_OPTIONS_TIMEOUT_USEC, &usec, "the timeout");
  // TCP_NODELAY: libssh writes some messages in two parts, and the handshake and the job's
  // hand-over send several small ones in a row; under Nagle's algorithm a second one waits for
  // the ACK of the first, which the peer delays up to 40 ms: ~40 ms of every launch before.
  int nodelay = 1;
  set_option(s, SSH_OPTIONS_NODELAY, &nodelay, "TCP_NODELAY");
}

SshSession SshSession::connect(const SshTarget& target, const SshOptions& options) {
  open_libssh(target.host);
  quiet_libssh();
  auto s = std::make_unique<Impl>();
  s->host = target.host;
  s->address = target.host;
  s->session = ssh_new();
  if (s->session == nullptr) throw s->fail(SshError::Kind::kConfig, "ssh_new failed");

  set_session_options(*s, target, options);
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

void connect_each(const std::vector<SshTarget>& targets, const SshOptions& options,
                  const ConnectResult& done) {
  std::atomic<size_t> next{0};
  std::atomic<size_t> connected{0};
  const auto start = std::chrono::steady_clock::now();
  auto work = [&] {
    for (size_t i = next++; i < targets.size(); i = next++) {
      log::debug("ssh {}: connecting", targets[i].host);
      std::optional<std::variant<SshSession, SshError>> result;
      try {
        result.emplace(SshSession::connect(targets[i], options));
        log::info("hosts connected {}/{}: {} in {:.2f} s", ++connected, targets.size(),
                  targets[i].host, log::since(start));
      } catch (const SshError& e) {
        result.emplace(e);
      } catch (const std::exception& e) {
        result.emplace(SshError(SshError::Kind::kConnect, targets[i].host, e.what()));
      }
      if (std::holds_alternative<SshError>(*result)) {
        log::debug("ssh {}: failed after {:.2f} s", targets[i].host, log::since(start));
      }
      done(i, std::move(*result));
    }
  };
  std::vector<std::thread> threads;
  const size_t n = std::min(targets.size(), kMaxConnectThreads);
  threads.reserve(n);
  for (size_t t = 0; t < n; ++t) threads.emplace_back(work);
  for (auto& t : threads) t.join();
}

std::vector<std::variant<SshSession, SshError>> connect_all(const std::vector<SshTarget>& targets,
                                                            const SshOptions& options) {
  std::vector<std::optional<std::variant<SshSession, SshError>>> slots(targets.size());
  connect_each(targets, options, [&](size_t i, std::variant<SshSession, SshError> result) {
    slots[i].emplace(std::move(result));
  });
  std::vector<std::variant<SshSession, SshError>> results;
  results.reserve(targets.size());
  for (auto& slot : slots) results.push_back(std::move(*slot));
  return results;
}

}  // namespace mlrun
