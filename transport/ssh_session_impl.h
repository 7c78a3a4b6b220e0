// SshSession's insides, shared by its source files (internal): ssh_session.cc (connecting)
// and ssh_channel.cc (running a command on a session: the pump and RemoteCommand).
#pragma once

#include <mutex>
#include <string>
#include <utility>

#include <fmt/format.h>
#include <libssh/libssh.h>

#include "transport/ssh_session.h"

namespace mlrun {
namespace ssh_detail {

// libssh's log level and log callback are thread-local, so every thread that calls into libssh
// installs the no-op callback: nothing libssh says may reach the user's terminal, whatever
// LogLevel ~/.ssh/config sets.
void quiet_libssh();

}  // namespace ssh_detail

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
    ssh_detail::quiet_libssh();
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

}  // namespace mlrun
