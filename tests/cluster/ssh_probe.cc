// Drives transport/ssh_session.h from shell tests (tests/cluster/*.sh).
//
// Options: --timeout MS (connect timeout), --keepalive S (TCP keepalive idle seconds).
//
//   ssh_probe [--timeout MS] connect HOST...
//       Connects to every host at once; prints "HOST: ok" or the error, one line each.
//   ssh_probe [--timeout MS] sockopts HOST...
//       As connect, then "HOST: nodelay=N keepalive=N" (the connection's TCP_NODELAY and
//       SO_KEEPALIVE, -1 when unreadable).
//   ssh_probe [--timeout MS] [--close-stdin] [--stop-after MS] run COMMAND HOST...
//       Runs COMMAND on every host as RemoteCommands, payload = this program's stdin (read to
//       EOF first). Prints each output line as "HOST out|err: LINE", then "HOST status: ..."
//       --close-stdin sends EOF after the payload; --stop-after stops every command after MS.
//   ssh_probe [--timeout MS] run-sync COMMAND HOST
//       SshSession::run with this program's stdout / stderr; exits with the remote status.
//
// Exit: 0 when every host connected (and, for run, every command exited 0); 1 otherwise.
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "transport/ssh_session.h"

namespace {

using mlrun::RemoteCommand;
using mlrun::RemoteExit;
using mlrun::SshError;
using mlrun::SshSession;

std::string describe(const RemoteExit& e) {
  std::string s = "exit=" + std::to_string(e.exit_code);
  if (!e.signal.empty()) s += " signal=" + e.signal;
  if (!e.error.empty()) s += " error=" + e.error;
  return s;
}

// Splits a stream's bytes into lines, printed with a prefix.
struct LinePrinter {
  std::string prefix, partial;
  void add(const char* p, size_t n) {
    partial.append(p, n);
    for (size_t nl; (nl = partial.find('\n')) != std::string::npos;) {
      std::cout << prefix << partial.substr(0, nl) << "\n";
      partial.erase(0, nl + 1);
    }
  }
  void finish() {
    if (!partial.empty()) std::cout << prefix << partial << " [no newline]\n";
    partial.clear();
  }
};

int run_all(std::vector<SshSession> sessions, const std::string& command,
            const std::string& payload, bool close_stdin, long stop_after_ms) {
  struct Job {
    RemoteCommand cmd;
    LinePrinter out, err;
    bool out_open = true, err_open = true, done = false;
  };
  std::vector<Job> jobs;
  for (auto& s : sessions) {
    std::string host = s.host();
    jobs.push_back(Job{RemoteCommand::start(std::move(s), command, payload),
                       LinePrinter{host + " out: ", ""}, LinePrinter{host + " err: ", ""}});
    if (close_stdin) jobs.back().cmd.close_stdin();
  }
  const auto start = std::chrono::steady_clock::now();
  bool stopped = false;
  int rc = 0;
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<std::pair<Job*, int>> who;  // 0 out, 1 err, 2 done
    for (auto& j : jobs) {
      if (j.out_open) fds.push_back({j.cmd.stdout_fd(), POLLIN, 0}), who.push_back({&j, 0});
      if (j.err_open) fds.push_back({j.cmd.stderr_fd(), POLLIN, 0}), who.push_back({&j, 1});
      if (!j.done) fds.push_back({j.cmd.done_fd(), POLLIN, 0}), who.push_back({&j, 2});
    }
    if (fds.empty()) break;
    int timeout = -1;
    if (stop_after_ms >= 0 && !stopped) {
      auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::steady_clock::now() - start)
                         .count();
      if (elapsed >= stop_after_ms) {
        for (auto& j : jobs) j.cmd.stop();
        stopped = true;
      } else {
        timeout = static_cast<int>(stop_after_ms - elapsed);
      }
    }
    if (poll(fds.data(), fds.size(), timeout) < 0) continue;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      auto [job, kind] = who[i];
      if (kind == 2) {
        job->done = true;
        continue;
      }
      char buf[4096];
      ssize_t n = read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        (kind == 0 ? job->out : job->err).add(buf, static_cast<size_t>(n));
      } else if (n == 0) {
        (kind == 0 ? job->out_open : job->err_open) = false;
        (kind == 0 ? job->out : job->err).finish();
      }
    }
  }
  for (auto& j : jobs) {
    RemoteExit e = j.cmd.wait();
    std::cout << j.cmd.host() << " status: " << describe(e) << "\n";
    if (!e.ok()) rc = 1;
  }
  return rc;
}

int usage() {
  std::cerr << "usage: ssh_probe [--timeout MS] [--close-stdin] [--stop-after MS] "
               "connect HOST... | sockopts HOST... | run COMMAND HOST... | run-sync COMMAND HOST\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  mlrun::SshOptions options;
  bool close_stdin = false;
  long stop_after_ms = -1;
  int i = 1;
  for (; i < argc && argv[i][0] == '-'; ++i) {
    std::string a = argv[i];
    if (a == "--timeout" && i + 1 < argc) {
      options.connect_timeout = std::chrono::milliseconds(std::atol(argv[++i]));
    } else if (a == "--keepalive" && i + 1 < argc) {
      options.keepalive_idle = std::chrono::seconds(std::atol(argv[++i]));
    } else if (a == "--close-stdin") {
      close_stdin = true;
    } else if (a == "--stop-after" && i + 1 < argc) {
      stop_after_ms = std::atol(argv[++i]);
    } else {
      return usage();
    }
  }
  if (i >= argc) return usage();
  std::string mode = argv[i++];
  std::string command;
  if (mode == "run" || mode == "run-sync") {
    if (i >= argc) return usage();
    command = argv[i++];
  } else if (mode != "connect" && mode != "sockopts") {
    return usage();
  }
  std::vector<mlrun::SshTarget> targets;
  for (; i < argc; ++i) targets.push_back({argv[i], "", 0});
  if (targets.empty()) return usage();

  std::string payload;
  if (mode != "connect" && mode != "sockopts") {
    payload.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  }

  auto results = mlrun::connect_all(targets, options);
  std::vector<SshSession> sessions;
  int rc = 0;
  for (auto& r : results) {
    if (auto* e = std::get_if<SshError>(&r)) {
      std::cout << e->what() << "\n";
      rc = 1;
    } else {
      auto& s = std::get<SshSession>(r);
      if (mode == "connect") std::cout << s.host() << ": ok\n";
      if (mode == "sockopts") {
        std::cout << s.host()
                  << ": nodelay=" << s.socket_option(IPPROTO_TCP, TCP_NODELAY).value_or(-1)
                  << " keepalive=" << s.socket_option(SOL_SOCKET, SO_KEEPALIVE).value_or(-1)
                  << "\n";
      }
      sessions.push_back(std::move(s));
    }
  }
  std::cout.flush();
  if (mode == "connect" || mode == "sockopts" || rc != 0) return rc;
  if (mode == "run-sync") {
    RemoteExit e = sessions.at(0).run(command, payload, STDOUT_FILENO, STDERR_FILENO);
    if (!e.error.empty()) std::cerr << "ssh_probe: " << e.error << "\n";
    return e.status();
  }
  return run_all(std::move(sessions), command, payload, close_stdin, stop_after_ms);
}
