// The floor for launching over SSH (issue 4's benchmark): a bare program that connects to every
// host at once with libssh (a thread per host: connect, host key check, public-key auth, exec)
// and runs `hostname` once per slot, with nothing else. mlrun's multi-host launch is measured
// against this and against `mpirun --hostfile` on the same hosts (bench/ssh_floor.sh).
//
//   ssh_floor [--slots N] [--repeat R] [--timeout MS] [--nodelay] HOST...
//
// --nodelay sets TCP_NODELAY (SSH_OPTIONS_NODELAY) on each connection, as mlrun does since
// 2026-12-04; without it, libssh's default (Nagle's algorithm on) as before.
//
// Reads ~/.ssh (from $HOME) like mlrun. Prints one line per repeat, "hosts=H slots=S
// seconds=T", and exits non-zero when any host fails or prints the wrong number of lines.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <libssh/callbacks.h>
#include <libssh/libssh.h>

namespace {

const char* const kUsage =
    "usage: ssh_floor [--slots N] [--repeat R] [--timeout MS] [--nodelay] HOST...\n";

void discard_log(int, const char*, const char*, void*) {}

struct HostResult {
  std::string output;
  std::string error;
  int exit_status = -1;
};

// Connects, checks the host key, authenticates and runs command; everything libssh needs for
// one remote command, nothing more.
HostResult run_on(const std::string& host, const std::string& command, long timeout_ms,
                  bool nodelay) {
  ssh_set_log_callback(discard_log);  // thread-local in libssh
  HostResult r;
  ssh_session s = ssh_new();
  const char* home = std::getenv("HOME");
  std::string ssh_dir = std::string(home != nullptr ? home : "/root") + "/.ssh";
  ssh_options_set(s, SSH_OPTIONS_SSH_DIR, ssh_dir.c_str());
  ssh_options_set(s, SSH_OPTIONS_HOST, host.c_str());
  ssh_options_parse_config(s, nullptr);
  int verbosity = SSH_LOG_NOLOG;
  ssh_options_set(s, SSH_OPTIONS_LOG_VERBOSITY, &verbosity);
  long seconds = timeout_ms / 1000, usec = (timeout_ms % 1000) * 1000;
  ssh_options_set(s, SSH_OPTIONS_TIMEOUT, &seconds);
  ssh_options_set(s, SSH_OPTIONS_TIMEOUT_USEC, &usec);
  int on = nodelay ? 1 : 0;
  ssh_options_set(s, SSH_OPTIONS_NODELAY, &on);
  ssh_channel ch = nullptr;
  if (ssh_connect(s) != SSH_OK) {
    r.error = std::string("connect: ") + ssh_get_error(s);
  } else if (ssh_session_is_known_server(s) != SSH_KNOWN_HOSTS_OK) {
    r.error = "host key not known";
  } else if (ssh_userauth_publickey_auto(s, nullptr, nullptr) != SSH_AUTH_SUCCESS) {
    r.error = std::string("auth: ") + ssh_get_error(s);
  } else if ((ch = ssh_channel_new(s)) == nullptr || ssh_channel_open_session(ch) != SSH_OK ||
             ssh_channel_request_exec(ch, command.c_str()) != SSH_OK) {
    r.error = std::string("exec: ") + ssh_get_error(s);
  } else {
    char buf[4096];
    int n;
    while ((n = ssh_channel_read(ch, buf, sizeof buf, 0)) > 0) r.output.append(buf, n);
    r.exit_status = ssh_channel_get_exit_status(ch);
  }
  if (ch != nullptr) ssh_channel_free(ch);
  ssh_disconnect(s);
  ssh_free(s);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  int slots = 2, repeat = 1;
  long timeout_ms = 10000;
  bool nodelay = false;
  std::vector<std::string> hosts;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--slots" && i + 1 < argc) {
      slots = std::atoi(argv[++i]);
    } else if (a == "--repeat" && i + 1 < argc) {
      repeat = std::atoi(argv[++i]);
    } else if (a == "--timeout" && i + 1 < argc) {
      timeout_ms = std::atol(argv[++i]);
    } else if (a == "--nodelay") {
      nodelay = true;
    } else if (a.starts_with("-")) {
      std::fputs(kUsage, stderr);
      return 2;
    } else {
      hosts.push_back(a);
    }
  }
  if (hosts.empty() || slots < 1 || repeat < 1) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  // One exec per host starts every slot's `hostname`, as a launcher's per-host agent would.
  std::string command;
  for (int k = 0; k < slots; ++k) command += "hostname & ";
  command += "wait";

  ssh_set_log_callback(discard_log);
  int rc = 0;
  for (int round = 0; round < repeat; ++round) {
    std::vector<HostResult> results(hosts.size());
    auto start = std::chrono::steady_clock::now();
    std::vector<std::thread> threads;
    for (size_t h = 0; h < hosts.size(); ++h) {
      threads.emplace_back([&, h] { results[h] = run_on(hosts[h], command, timeout_ms, nodelay); });
    }
    for (auto& t : threads) t.join();
    double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (size_t h = 0; h < hosts.size(); ++h) {
      const auto& r = results[h];
      int lines = 0;
      for (char c : r.output) lines += c == '\n';
      if (!r.error.empty() || r.exit_status != 0 || lines != slots) {
        std::fprintf(stderr, "ssh_floor: %s: %s (exit %d, %d lines)\n", hosts[h].c_str(),
                     r.error.empty() ? "wrong result" : r.error.c_str(), r.exit_status, lines);
        rc = 1;
      }
    }
    std::printf("hosts=%zu slots=%d seconds=%.3f\n", hosts.size(), slots, seconds);
  }
  return rc;
}
