// SSH to the job's hosts (docs/design.md §7): libssh with the user's ~/.ssh/config, agent and keys,
// a connect timeout, never a prompt, and host keys checked against known_hosts with a per-host
// error that names the fix. libssh's own logging never reaches stderr.
//
// The head's event loop sees a remote command only through file descriptors: RemoteCommand owns a
// thread that pumps the SSH channel into two pipes and signals its end on a third fd, so the
// loop polls pipes as it does for local workers.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace mlrun {

/// Where to connect. Empty user / port 0: from ~/.ssh/config, else the local user / 22.
/// host is the name as the user wrote it: ~/.ssh/config's Host patterns match it.
struct SshTarget {
  std::string host;
  std::string user;
  int port = 0;
};

struct SshOptions {
  /// Bounds the TCP connect plus the SSH handshake, and each authentication step after it.
  /// (Name resolution is the system resolver's and is not bounded here.)
  std::chrono::milliseconds connect_timeout{10000};
  /// TCP keepalive on the connection: after this long without traffic the kernel probes the
  /// peer (3 probes, half this apart), so a host that vanished (power, link) ends a running
  /// command with kLost within about 2.5x this. 0: no keepalive.
  std::chrono::seconds keepalive_idle{10};
};

/// Why a host could not be used. what() reads "HOST: cause: fix", for the user as is.
class SshError : public std::runtime_error {
 public:
  enum class Kind {
    kConfig,          ///< ~/.ssh/config could not be parsed, or libssh refused an option
    kConnect,         ///< name not resolved, connection refused, network unreachable
    kTimeout,         ///< no answer within SshOptions::connect_timeout
    kHostKeyUnknown,  ///< the host is not in known_hosts
    kHostKeyChanged,  ///< known_hosts holds another key for it (or a key of another type)
    kAuth,            ///< no key from the agent or ~/.ssh was accepted
    kChannel,         ///< the session could not open a channel or run the command
    kLost,            ///< the connection broke while a command ran
  };
  SshError(Kind kind, std::string host, const std::string& message);
  Kind kind() const { return kind_; }
  const std::string& host() const { return host_; }

 private:
  Kind kind_;
  std::string host_;
};

/// How a remote command ended.
struct RemoteExit {
  int exit_code = -1;  ///< 0..255 when the command exited; -1 otherwise
  std::string signal;  ///< "TERM", "KILL", ...: the command died of this signal (no "SIG")
  std::string error;   ///< set when no exit status came: connection lost, stopped, exec failed
  SshError::Kind error_kind = SshError::Kind::kLost;  ///< meaningful when error is set

  bool ok() const { return error.empty() && signal.empty() && exit_code == 0; }
  /// Shell convention: the exit code, 128+N for signal N, 255 when no status came (as ssh).
  int status() const;
};

/// 126 and 127: what a shell exits with when it cannot run the command it was given (126: not
/// executable; 127: not found, or a library it links is missing). An mlrun agent never exits
/// with them itself (launcher/agent_command.cc), so to its head they mean it never ran.
constexpr bool shell_could_not_run(int exit_code) {
  return exit_code == 126 || exit_code == 127;
}

/// One connected and authenticated session. Move-only; used by one thread at a time.
class SshSession {
 public:
  /// Connects and authenticates: options from $HOME/.ssh/config (the passwd home when HOME is
  /// unset) and /etc/ssh/ssh_config, host key checked against $HOME/.ssh/known_hosts, then the
  /// agent and the identity files (ssh_userauth_publickey_auto). Never prompts: no password, no
  /// keyboard-interactive, no key passphrase. Throws SshError naming target.host.
  static SshSession connect(const SshTarget& target, const SshOptions& options = {});

  SshSession(SshSession&&) noexcept;
  SshSession& operator=(SshSession&&) noexcept;
  ~SshSession();

  /// The target's host as given to connect().
  const std::string& host() const;
  /// This machine's address on the connection (how the remote host sees us), e.g. "10.0.0.1".
  std::string local_address() const;
  /// An int socket option of the connection (getsockopt), e.g. IPPROTO_TCP / TCP_NODELAY;
  /// nullopt when it cannot be read. For tests and diagnostics (tests/cluster/ssh_probe.cc).
  std::optional<int> socket_option(int level, int name) const;

  /// Runs command (through the remote user's shell) and blocks until it ends. Writes
  /// stdin_data to its stdin, then sends EOF; copies its stdout / stderr bytes to the given
  /// fds as they arrive. A broken connection or failed exec is reported in RemoteExit::error.
  RemoteExit run(const std::string& command, std::string_view stdin_data, int stdout_fd,
                 int stderr_fd);

  struct Impl;  // libssh state (transport/ssh_session_impl.h); public so helpers can name it

 private:
  explicit SshSession(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
  friend class RemoteCommand;
};

/// Connects to every target at once (a thread each) and returns one result per target, in
/// order, so that every unreachable host can be reported together.
std::vector<std::variant<SshSession, SshError>> connect_all(const std::vector<SshTarget>& targets,
                                                            const SshOptions& options = {});

/// Each target's result as soon as it is known: the session, or why there is none.
using ConnectResult = std::function<void(std::size_t index, std::variant<SshSession, SshError>)>;
/// As connect_all, but hands target i's result to done(i, ...) on the thread that connected it,
/// right after its own connect (so that work on one host need not wait for the slowest); returns
/// once every target's done has returned. done runs on several threads at once.
void connect_each(const std::vector<SshTarget>& targets, const SshOptions& options,
                  const ConnectResult& done);

/// A command running on a remote host, pumped by a thread of its own.
///
/// stdin: stdin_data is written first and stdin then stays open, so the remote side can take EOF
/// on stdin as "the head is gone" (closing a channel does not kill a command without a pty:
/// its lifeline is stdin). The token and other secrets go in stdin_data, never in command.
/// A command can also start with nothing on stdin yet and be handed its input later
/// (write_stdin): it runs meanwhile, its input held back.
class RemoteCommand {
 public:
  /// Takes the session and starts command on it in the background. Never throws for remote
  /// failures: a channel or exec failure ends the command with RemoteExit::error set.
  static RemoteCommand start(SshSession session, std::string command, std::string stdin_data);

  RemoteCommand(RemoteCommand&&) noexcept;
  RemoteCommand& operator=(RemoteCommand&&) noexcept;
  /// stop(), then wait().
  ~RemoteCommand();

  const std::string& host() const;
  /// This machine's address on the connection, as SshSession::local_address() said at start().
  const std::string& local_address() const;
  /// Read ends of the command's stdout and stderr: non-blocking, close-on-exec, owned by this
  /// object (do not close them). EOF once the stream has ended and every byte has been read.
  int stdout_fd() const;
  int stderr_fd() const;
  /// Becomes readable when the command has ended (wait() then returns at once) and stays
  /// readable. By then the pump has closed both pipes' write ends: what is left in them is the
  /// command's last output, followed by EOF.
  int done_fd() const;

  /// Writes data to the command's stdin after what was written before (the pump's thread sends
  /// it; nothing once stdin is closed).
  void write_stdin(std::string data);
  /// Sends EOF on the command's stdin, after what write_stdin was given.
  void close_stdin();
  /// Closes the channel and the connection: the remote command's stdin reaches EOF and its
  /// output goes nowhere. Output not yet read from the pipes is kept. Idempotent.
  void stop();
  /// Blocks until the command has ended and the pump has finished; repeatable.
  RemoteExit wait();

  struct State;

 private:
  explicit RemoteCommand(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace mlrun
