// Other hosts (`mlrun doctor -H/--hostfile`): SSH to all at once, this host's probe run on each
// against a rendezvous served here, within one bound for the whole phase; the TCP connect test
// that the remote side runs; and that side's stdin lifeline.
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <variant>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <mlrun/rendezvous.hpp>

#include "doctor/doctor.h"
#include "doctor/impl.h"
#include "hostfiles/hostfile.h"
#include "launcher/head.h"
#include "launcher/plan.h"
#include "transport/ssh_session.h"
#include "worker/net.h"

namespace mlrun::doctor {
namespace {

// The command that makes one host's half of the report: `mlrun doctor --json --connect-test ...`
// there, toward this host's address on the connection, with the rendezvous port to try.
std::string remote_probe_command(const DoctorOptions& o, const std::string& address, int port) {
  // The job's workers get this host's PATH, LD_LIBRARY_PATH and PYTHON (docs/design.md §6), so the
  // probe there runs with them too: it then finds what the job would find.
  std::string command = "exec env";
  for (const char* name : {"PATH", "LD_LIBRARY_PATH", "PYTHON"}) {
    if (const char* v = std::getenv(name))
      command += " " + shell_quote(fmt::format("{}={}", name, v));
  }
  // --stdin-lifeline: the probe there ends when its stdin does, i.e. when this doctor stops
  // waiting for it or dies; nothing is left running on a host that was given up on.
  std::vector<std::string> args = {self_path(),        "doctor",
                                   "--json",           "--stdin-lifeline",
                                   "--master_addr",    address,
                                   "--connect-test",   make_endpoint(address, port),
                                   "--timeout-ms",     std::to_string(o.timeout_ms),
                                   "--python-timeout", fmt::format("{}", o.python_timeout),
                                   "--backend",        o.backend,
                                   "--iface",          o.iface};
  for (const auto& a : args) command += " " + shell_quote(a);
  return command;
}

// One host's section from what its probe printed (stdout: the JSON report) and how it ended.
HostReport remote_section(const HostEntry& entry, const std::string& address, const RemoteExit& ex,
                          const std::string& out, const std::string& err) {
  HostReport h;
  h.host = entry.host;
  h.local = false;
  h.address = address;
  if (!ex.error.empty()) {
    h.probe_error = fmt::format("{} ({})", ex.error, self_path());
    return h;
  }
  try {
    nlohmann::json j = nlohmann::json::parse(out);
    HostReport probed = host_from_json(j.at("hosts").at(0));
    std::string name = probed.host;
    probed.host = entry.host;
    probed.hostname = name == entry.host ? "" : name;
    probed.local = false;
    probed.address = address;
    if (!probed.rendezvous_port) {
      probed.probe_error = "its mlrun did not report the rendezvous-port check (an older mlrun?)";
    }
    return probed;
  } catch (const std::exception& e) {
    std::string why = last_line(err);
    if (why.empty()) why = e.what();
    h.probe_error = fmt::format("`{} doctor --json` there {}: {}", self_path(),
                                ex.exit_code >= 0    ? fmt::format("exited with {}", ex.exit_code)
                                : !ex.signal.empty() ? fmt::format("died of SIG{}", ex.signal)
                                                     : std::string("ended without a status"),
                                why);
    // Its shell could not run it (launcher/head.cc says the same of an agent).
    if (shell_could_not_run(ex.exit_code)) {
      h.probe_error += ex.exit_code == 127
                           ? " (every host needs mlrun at this path, with the libraries it links)"
                           : " (it is there but cannot be executed)";
    }
    return h;
  }
}

// A probe running on one host, its output collected as it comes.
struct RunningProbe {
  std::size_t index = 0;  // In the list of remote hosts.
  std::string address;
  std::optional<RemoteCommand> command;
  std::string out, err;
  bool out_open = true, err_open = true, ended = false;
};

// Reads what fd has now into sink (kept up to 1 MiB: a report is a few KiB); false at EOF.
bool drain(int fd, std::string& sink) {
  char buf[8192];
  while (true) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0) {
      if (sink.size() < (1u << 20)) sink.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
}

// Collects every probe's output until each has ended or the deadline passes. A probe ends when
// its command is done and both of its pipes are drained.
void collect_probes(std::vector<RunningProbe>& probes, Clock::time_point deadline) {
  while (true) {
    std::vector<pollfd> fds;
    std::vector<std::pair<RunningProbe*, int>> owners;  // 0 stdout, 1 stderr, 2 done
    for (auto& p : probes) {
      if (p.ended) continue;
      if (p.out_open) fds.push_back({p.command->stdout_fd(), POLLIN, 0}), owners.push_back({&p, 0});
      if (p.err_open) fds.push_back({p.command->stderr_fd(), POLLIN, 0}), owners.push_back({&p, 1});
      fds.push_back({p.command->done_fd(), POLLIN, 0});
      owners.push_back({&p, 2});
    }
    if (fds.empty()) return;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return;
    int n = poll(fds.data(), fds.size(), static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return;  // Not expected; the probes still running are reported as such.
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      auto [p, which] = owners[i];
      if (which == 0) p->out_open = drain(p->command->stdout_fd(), p->out);
      if (which == 1) p->err_open = drain(p->command->stderr_fd(), p->err);
      if (which == 2) {
        // Done: the pump closed both pipes' write ends first, so what is left ends in EOF.
        if (p->out_open) p->out_open = drain(p->command->stdout_fd(), p->out);
        if (p->err_open) p->err_open = drain(p->command->stderr_fd(), p->err);
        p->ended = !p->out_open && !p->err_open;
      }
    }
  }
}

// The listed hosts that are not this one. A listed name for this host becomes its section's
// host (the name it was found under stays as its hostname).
std::vector<HostEntry> remote_entries(const std::vector<HostEntry>& hosts, DoctorReport& report) {
  std::vector<HostEntry> remote;
  for (const auto& e : hosts) {
    if (is_local_host(e.host)) {
      if (report.hosts.front().host != e.host) {
        report.hosts.front().hostname = report.hosts.front().host;
        report.hosts.front().host = e.host;
      }
    } else {
      remote.push_back(e);
    }
  }
  return remote;
}

// A real rendezvous server, on every address, as a job's head serves it; nullopt (with the
// error printed) when it cannot be served.
std::optional<rendezvous::Server> serve_check_rendezvous(const DoctorOptions& o) {
  rendezvous::ServerOptions so;
  so.host = "0.0.0.0";
  so.port = o.port;
  so.token = random_hex(16);
  so.job_id = "mlrun-doctor";
  so.log = [](std::string_view) {};  // The probes connect and never authenticate.
  try {
    return rendezvous::Server::start(so);
  } catch (const std::exception& e) {
    fmt::print(stderr, "mlrun: error: cannot serve the rendezvous for the check on port {}: {}\n",
               o.port, e.what());
    return std::nullopt;
  }
}

// SSH to every remote host at once, then the probe started on each one reached; a host not
// reached gets its section here.
std::vector<RunningProbe> start_probes(const DoctorOptions& o, const std::vector<HostEntry>& remote,
                                       int rendezvous_port, std::vector<HostReport>& sections) {
  std::vector<SshTarget> targets;
  for (const auto& e : remote) targets.push_back({e.host, e.user, e.port});
  SshOptions ssh;
  ssh.connect_timeout = std::chrono::milliseconds(o.ssh_timeout_ms);
  auto sessions = connect_all(targets, ssh);
  std::vector<RunningProbe> probes;
  for (std::size_t i = 0; i < remote.size(); ++i) {
    if (auto* e = std::get_if<SshError>(&sessions[i])) {
      sections[i].host = remote[i].host;
      sections[i].local = false;
      sections[i].reachable = false;
      sections[i].ssh_error = e->what();
      continue;
    }
    auto& session = std::get<SshSession>(sessions[i]);
    RunningProbe p;
    p.index = i;
    p.address = session.local_address();
    p.command.emplace(RemoteCommand::start(
        std::move(session), remote_probe_command(o, p.address, rendezvous_port), ""));
    probes.push_back(std::move(p));
  }
  return probes;
}

// Each probe's section once collection is over: its report where it ended, else it is stopped
// and reported as not finished within limit_s.
void finish_probes(std::vector<RunningProbe>& probes, const std::vector<HostEntry>& remote,
                   int limit_s, std::vector<HostReport>& sections) {
  for (auto& p : probes) {
    if (p.ended) {
      sections[p.index] =
          remote_section(remote[p.index], p.address, p.command->wait(), p.out, p.err);
      continue;
    }
    p.command->stop();
    HostReport& h = sections[p.index];
    h.host = remote[p.index].host;
    h.local = false;
    h.address = p.address;
    h.probe_timed_out = true;
    h.probe_error = fmt::format(
        "no report within {} s (--probe-timeout; the host accepted SSH, but `mlrun doctor` there "
        "did not finish: a hung command, file system or driver?)",
        limit_s);
  }
  probes.clear();  // Waits for each pump; a stopped one ends at once.
}

}  // namespace

// Every listed host other than this one: SSH to all at once, then the probe on each, all
// running together against a rendezvous served here on o.port, within one bound for the whole
// phase (remote_probe_limit_seconds). Returns 0, or 1 when nothing could be served.
int check_remote_hosts(const DoctorOptions& o, const std::vector<HostEntry>& hosts,
                       DoctorReport& report) {
  const std::vector<HostEntry> remote = remote_entries(hosts, report);
  if (remote.empty()) {
    report.remote_status = "every listed host is this host: nothing to check over SSH";
    return 0;
  }
  const int limit_s = remote_probe_limit_seconds(o);
  const auto deadline = Clock::now() + std::chrono::seconds(limit_s);
  std::optional<rendezvous::Server> server = serve_check_rendezvous(o);
  if (!server) return 1;
  report.rendezvous_port = server->port();
  std::vector<HostReport> sections(remote.size());
  std::vector<RunningProbe> probes = start_probes(o, remote, report.rendezvous_port, sections);
  // Every probe runs at once; a host that has not answered by the deadline is given up on:
  // its connection is closed, which ends the probe there (its stdin lifeline).
  collect_probes(probes, deadline);
  finish_probes(probes, remote, limit_s, sections);
  for (auto& s : sections) report.hosts.push_back(std::move(s));
  report.remote_status = fmt::format(
      "SSH to {} host{}, each probed there within {} s; rendezvous port {} served on this host "
      "for the check",
      remote.size(), remote.size() == 1 ? "" : "s", limit_s, report.rendezvous_port);
  return 0;
}

// --stdin-lifeline: a remote probe's stdin is its SSH channel's; its EOF means the doctor that
// asked has given up on this host (its bound passed) or is gone. The probe then leaves at once,
// with the command it was waiting for, so that nothing is left running there. Exiting from a
// thread is this command's own top-level choice: the report it would print has no reader.
void watch_stdin_lifeline() {
  std::thread([] {
    char buf[256];
    while (true) {
      ssize_t n = read(STDIN_FILENO, buf, sizeof buf);
      if (n > 0 || (n < 0 && errno == EINTR)) continue;
      break;
    }
    if (pid_t child = g_probe_child.load(); child > 0) kill(-child, SIGKILL);
    _exit(1);
  }).detach();
}

int remote_probe_limit_seconds(const DoctorOptions& o) {
  if (o.probe_timeout_s > 0) return o.probe_timeout_s;
  double own = o.ssh_timeout_ms / 1000.0 + kMpirunTimeoutSeconds + o.python_timeout +
               o.timeout_ms / 1000.0 + 15;
  return std::max(kProbeTimeoutSeconds, static_cast<int>(std::ceil(own)));
}

PortCheck tcp_connect_test(const std::string& endpoint, int timeout_ms) {
  PortCheck c;
  c.target = endpoint;
  std::string host;
  int port = 0;
  if (!split_endpoint(endpoint, host, port)) {
    c.error = "not HOST:PORT";
    return c;
  }
  auto start = Clock::now();
  auto elapsed = [&start] {
    return static_cast<long>(
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count());
  };
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int gai = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (gai != 0 || res == nullptr) {
    c.error = fmt::format("cannot resolve {}: {}", host, gai_strerror(gai));
    return c;
  }
  int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    c.error = fmt::format("socket: {}", std::strerror(errno));
    freeaddrinfo(res);
    return c;
  }
  int rc = connect(fd, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  int err = rc == 0 ? 0 : errno;
  if (rc != 0 && err == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    while (true) {
      long left = timeout_ms - elapsed();
      if (left <= 0) {
        err = ETIMEDOUT;
        break;
      }
      int n = poll(&p, 1, static_cast<int>(left));
      if (n < 0 && errno == EINTR) continue;
      if (n == 0) {
        err = ETIMEDOUT;
        break;
      }
      socklen_t len = sizeof err;
      if (n < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      break;
    }
  }
  close(fd);
  c.elapsed_ms = elapsed();
  if (err == 0) {
    c.ok = true;
  } else if (err == ETIMEDOUT) {
    c.error = fmt::format("timed out after {} ms (a firewall?)", timeout_ms);
  } else if (err == ECONNREFUSED) {
    c.error = "refused (nothing listens there, or a firewall rejects the connection)";
  } else {
    c.error = std::strerror(err);
  }
  return c;
}

}  // namespace mlrun::doctor
