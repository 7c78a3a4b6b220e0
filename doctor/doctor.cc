// The `mlrun doctor` command: its flags and usage, the report's steps (this host, then the
// others), and --bandwidth, which launches the all-reduce sweep through mlrun. The probes, the
// report's forms and the remote hosts live in doctor_probe.cc, doctor_report.cc and
// doctor_remote.cc (doctor/impl.h).
#include "doctor/doctor.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "doctor/bandwidth.h"
#include "doctor/impl.h"
#include "hostfiles/hostfile.h"
#include "launcher/flags.h"
#include "launcher/options.h"
#include "launcher/plan.h"
#include "worker/net.h"

namespace mlrun::doctor {
namespace {

using Apply = std::function<void(const std::string& flag, const std::string& value)>;

Apply text(std::string& field) {
  return [&field](const std::string&, const std::string& v) { field = v; };
}

Apply set(bool& field) {
  return [&field](const std::string&, const std::string&) { field = true; };
}

Apply number(int& field, int lo, int hi, std::string_view what, std::vector<std::string>& errors) {
  return [&field, &errors, lo, hi, what](const std::string& flag, const std::string& v) {
    if (!parse_integer(v, field, lo, hi))
      errors.push_back(fmt::format("doctor: {}={}: expected {}", flag, v, what));
  };
}

Apply backend(std::string& field, std::vector<std::string>& errors) {
  return [&field, &errors](const std::string&, const std::string& v) {
    if (v != "auto" && v != "nccl" && v != "gloo" && v != "mpi") {
      errors.push_back(fmt::format("doctor: --backend={}: expected auto, nccl, gloo or mpi", v));
    } else {
      field = v;
    }
  };
}

Apply python_timeout(double& field, std::vector<std::string>& errors) {
  return [&field, &errors](const std::string&, const std::string& v) {
    char* end = nullptr;
    double d = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || d < 0 || d > 600) {
      errors.push_back(
          fmt::format("doctor: --python-timeout={}: expected seconds between 0 and 600", v));
    } else {
      field = d;
    }
  };
}

Apply connect_test(std::string& field, std::vector<std::string>& errors) {
  return [&field, &errors](const std::string&, const std::string& v) {
    std::string host;
    int port = 0;
    if (!split_endpoint(v, host, port) || host.empty()) {
      errors.push_back(
          fmt::format("doctor: --connect-test={}: expected HOST:PORT or [V6]:PORT", v));
    } else {
      field = v;
    }
  };
}

// The report's flags: which hosts, what to assume, and the bounds of the remote phase.
FlagTable report_flags(DoctorOptions& o, std::vector<std::string>& e) {
  return {
      {{"--json"}, "", "the report as one JSON object", set(o.json)},
      {{"--hostfile"}, "FILE", "check these hosts too", text(o.hostfile)},
      {{"-H", "--hosts"}, "HOST[:SLOTS],...", "or these", text(o.hosts)},
      {{"--backend"}, "auto|nccl|gloo|mpi", "as `mlrun` takes it", backend(o.backend, e)},
      {{"--iface"}, "NAME|auto", "as `mlrun` takes it", text(o.iface)},
      {{"--master_addr"},
       "ADDR",
       "as `mlrun` takes it: the interface choice prefers its subnet",
       text(o.master_addr)},
      {{"--python-timeout"},
       "SECONDS",
       "bound of the PyTorch probe (default 20; 0 skips it)",
       python_timeout(o.python_timeout, e)},
      {{"--port"},
       "P",
       "the rendezvous port the other hosts try (default: a free one)",
       number(o.port, 0, 65535, "a port (0: a free one)", e)},
      {{"--ssh-timeout-ms"},
       "N",
       "bound of each SSH connect (default 10000)",
       number(o.ssh_timeout_ms, 1, 600000, "milliseconds (1 to 600000)", e)},
      {{"--timeout-ms"},
       "N",
       "bound of each host's connect to the port (default 3000)",
       number(o.timeout_ms, 1, 600000, "milliseconds (1 to 600000)", e)},
      {{"--probe-timeout"},
       "SECONDS",
       "bound of the whole remote phase (default 60 or more)",
       number(o.probe_timeout_s, 1, 3600, "seconds (1 to 3600)", e)},
      {{"--connect-test"},
       "HOST:PORT",
       "what doctor runs on the other hosts: a TCP connect to HOST:PORT within --timeout-ms",
       connect_test(o.connect_test, e)},
      {{"--stdin-lifeline"},
       "",
       "what doctor runs on the other hosts: exit when stdin reaches EOF",
       set(o.stdin_lifeline)},
      {{"--help", "-h"}, "", "this text", set(o.help)},
  };
}

// --bandwidth's flags, the sweep's among them (each sets sweep_given).
FlagTable bandwidth_flags(DoctorOptions& o, std::vector<std::string>& e, bool& sweep_given) {
  FlagTable table = {
      {{"--bandwidth"}, "", "the all-reduce sweep instead of the report", set(o.bandwidth)},
      {{"--nproc_per_node"},
       "N",
       "ranks on each host (as `mlrun` takes it)",
       text(o.nproc_per_node)},
  };
  for (auto& flag : sweep_flag_table(o.sweep, e)) {
    flag.apply = [&sweep_given, apply = flag.apply](const std::string& f, const std::string& v) {
      sweep_given = true;
      apply(f, v);
    };
    table.push_back(std::move(flag));
  }
  return table;
}

const FlagSyntax kDoctorSyntax = {
    [](const std::string& arg) { return fmt::format("doctor: unknown argument '{}'", arg); },
    [](const std::string&, const Flag& flag) {
      return fmt::format("doctor: {} needs a value", flag.names.front());
    },
    [](const std::string&, const Flag& flag) {
      return fmt::format("doctor: {} takes no value", flag.names.front());
    },
};

// The checks of the flags together.
void check_doctor_args(const DoctorOptions& o, bool sweep_given, std::vector<std::string>& errors) {
  if (!o.hostfile.empty() && !o.hosts.empty()) {
    errors.push_back("doctor: give --hostfile or -H, not both");
  }
  if (!o.bandwidth) {
    if (sweep_given) {
      errors.push_back("doctor: -b/-e/-f/-n/-w/--op-timeout go with --bandwidth");
    }
    if (!o.nproc_per_node.empty())
      errors.push_back("doctor: --nproc_per_node goes with --bandwidth");
    return;
  }
  check_sweep_options(o.sweep, errors);
  // One rank measures no link, but a 1-rank NCCL communicator runs the whole GPU path: the
  // check to make on a machine with one GPU.
  if (o.hostfile.empty() && o.hosts.empty() &&
      (o.nproc_per_node.empty() || o.nproc_per_node == "1") && o.backend != "nccl") {
    errors.push_back(
        "doctor: --bandwidth needs at least 2 ranks (1 with --backend nccl): give "
        "-H/--hostfile, or --nproc_per_node N for N ranks on this host");
  }
  if (o.json) errors.push_back("doctor: --bandwidth prints a table; --json is for the report");
  if (!o.connect_test.empty()) errors.push_back("doctor: --connect-test is not for --bandwidth");
}

}  // namespace

FlagTable doctor_flag_table(DoctorArgs& r, bool& sweep_given) {
  FlagTable report = report_flags(r.options, r.errors);
  report.front().group = "options:";
  FlagTable bandwidth = bandwidth_flags(r.options, r.errors, sweep_given);
  bandwidth.front().group = "--bandwidth:";
  return concat({std::move(report), std::move(bandwidth)});
}

DoctorArgs parse_doctor_args(const std::vector<std::string>& args) {
  DoctorArgs r;
  bool sweep_given = false;
  parse_flags(doctor_flag_table(r, sweep_given), args, kDoctorSyntax, r.errors);
  check_doctor_args(r.options, sweep_given, r.errors);
  return r;
}

std::string doctor_usage() {
  DoctorArgs r;
  bool sweep_given = false;
  return "usage: mlrun doctor [--json] [--hostfile FILE | -H HOST[:SLOTS],...]\n"
         "                    [--backend auto|nccl|gloo|mpi] [--iface NAME|auto]\n"
         "                    [--master_addr ADDR] [--python-timeout SECONDS]\n"
         "                    [--port P] [--ssh-timeout-ms N] [--timeout-ms N]\n"
         "                    [--probe-timeout SECONDS]\n"
         "       mlrun doctor --bandwidth [--hostfile FILE | -H HOSTS | --nproc_per_node N]\n"
         "                    [--backend ...] [--iface ...] [-b 8] [-e 128M] [-f 2] [-n 20] "
         "[-w 5]\n"
         "                    [--op-timeout SECONDS]\n"
         "\n"
         "Reports this host's GPUs, NCCL, Gloo, Open MPI and PyTorch, its network interfaces,\n"
         "and the backend, interface and variables mlrun would use here, with the reasons.\n"
         "--backend, --iface and --master_addr mean what they mean to `mlrun`.\n"
         "\n"
         "With --hostfile / -H, every other host gets its own section: SSH reachability (all\n"
         "hosts at once, each bounded by --ssh-timeout-ms), the same report made there, and\n"
         "whether it can reach the rendezvous port: doctor serves a rendezvous on this host on\n"
         "--port (default: a free one) and each host tries a TCP connect to it within\n"
         "--timeout-ms. The whole remote phase is bounded by --probe-timeout (default 60 s, or\n"
         "more when the other bounds add up to more); a host with no report by then is named.\n"
         "Exit code 1 when any host has a problem, 2 for a usage error.\n"
         "\n"
         "--bandwidth launches an all-reduce sweep (float32 sum, out of place) over the planned\n"
         "ranks through mlrun, with the backend a job would get: Gloo over TCP, or NCCL with\n"
         "one GPU per rank. It prints it as nccl-tests' all_reduce_perf does (sizes -b to -e,\n"
         "times -f; -n timed and -w warm-up iterations), checks every value, and compares the\n"
         "peak bus bandwidth with the chosen interface's link speed.\n"
         "\n" +
         flags_usage(doctor_flag_table(r, sweep_given));
}

namespace {

// --bandwidth: the sweep's job, launched through mlrun itself; rank 0's table is passed through
// without its "[0] " tag.
int bandwidth_command(const DoctorOptions& o) {
  std::string self = self_path();
  std::vector<std::string> argv = {self};
  if (!o.hostfile.empty()) argv.insert(argv.end(), {"--hostfile", o.hostfile});
  if (!o.hosts.empty()) argv.insert(argv.end(), {"-H", o.hosts});
  if (!o.nproc_per_node.empty()) argv.insert(argv.end(), {"--nproc_per_node", o.nproc_per_node});
  argv.insert(argv.end(), {"--backend", o.backend});
  if (o.iface != "auto") argv.insert(argv.end(), {"--iface", o.iface});
  if (!o.master_addr.empty()) argv.insert(argv.end(), {"--master_addr", o.master_addr});
  // Each rank runs the sweep program installed next to mlrun (it alone loads Gloo or CUDA).
  std::string sweep =
      (std::filesystem::path(self).parent_path() / "mlrun-allreduce-sweep").string();
  if (access(sweep.c_str(), X_OK) != 0) {
    fmt::print(stderr,
               "mlrun: error: doctor --bandwidth: {} not found: it is built and installed with "
               "mlrun, next to it\n",
               sweep);
    return 2;
  }
  argv.insert(argv.end(), {"--no_python", sweep});
  for (auto& f : sweep_flags(o.sweep)) argv.push_back(f);
  fmt::print("# {}\n", shell_words(argv));
  std::fflush(stdout);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    fmt::print(stderr, "mlrun: error: pipe: {}\n", std::strerror(errno));
    return 1;
  }
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0) {
    fmt::print(stderr, "mlrun: error: fork: {}\n", std::strerror(errno));
    return 1;
  }
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    execv(cargv[0], cargv.data());
    _exit(127);
  }
  close(fds[1]);
  // Ctrl-C reaches the launcher too (same process group); it stops the ranks and exits, and
  // this process reports its exit code.
  signal(SIGINT, SIG_IGN);
  std::string pending;
  char buf[4096];
  auto emit = [](std::string_view line) {
    if (line.rfind("[0] ", 0) == 0) line.remove_prefix(4);
    fmt::print("{}\n", line);
    std::fflush(stdout);
  };
  while (true) {
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, static_cast<std::size_t>(n));
    std::size_t nl;
    while ((nl = pending.find('\n')) != std::string::npos) {
      emit(std::string_view(pending).substr(0, nl));
      pending.erase(0, nl + 1);
    }
  }
  if (!pending.empty()) emit(pending);
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  signal(SIGINT, SIG_DFL);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1;
}

}  // namespace

int doctor_command(const std::vector<std::string>& args) {
  // 0. The hidden mode that every rank of `doctor --bandwidth` runs.
  if (!args.empty() && args[0] == "--allreduce-sweep") {
    return allreduce_sweep_command({args.begin() + 1, args.end()});
  }
  // 1. Flags: every user error reported together.
  DoctorArgs parsed = parse_doctor_args(args);
  if (parsed.options.help) {
    fmt::print("{}", doctor_usage());
    return 0;
  }
  for (const auto& e : parsed.errors) fmt::print(stderr, "mlrun: error: {}\n", e);
  if (!parsed.errors.empty()) return 2;
  const DoctorOptions& o = parsed.options;
  if (o.stdin_lifeline) watch_stdin_lifeline();
  if (o.bandwidth) return bandwidth_command(o);
  // 2. The hosts asked for, read before anything is probed: a bad hostfile is a usage error.
  HostList hosts;
  if (!o.hostfile.empty() || !o.hosts.empty()) {
    hosts = o.hostfile.empty() ? parse_host_list(o.hosts) : read_hostfile(o.hostfile);
    for (const auto& e : hosts.errors) fmt::print(stderr, "mlrun: error: {}\n", format_error(e));
    if (!hosts.ok()) return 2;
  }
  // 3. This host: hardware, libraries, interfaces, and what the launcher would choose; the
  //    port check when this is the remote side of one.
  DoctorReport report;
  report.hosts.push_back(probe_local_host(o));
  if (!o.connect_test.empty()) {
    report.hosts.front().rendezvous_port = tcp_connect_test(o.connect_test, o.timeout_ms);
  }
  // 4. Other hosts: SSH to all at once, the same probe on each, and the rendezvous port.
  if (!o.hostfile.empty()) {
    report.remote_hosts = fmt::format("--hostfile {}", o.hostfile);
  } else if (!o.hosts.empty()) {
    report.remote_hosts = fmt::format("-H {}", o.hosts);
  }
  // Inside an allocation (not one of its steps) with no hosts named: the allocation's nodes.
  auto slurm = transport::read_slurm_env();
  if (report.remote_hosts.empty() && slurm.in_allocation() && !slurm.in_step()) {
    if (int rc = check_slurm_nodes(o, slurm, report); rc != 0) return rc;
  } else if (report.remote_hosts.empty()) {
    report.remote_status = "none (give --hostfile or -H to check other hosts)";
  } else if (int rc = check_remote_hosts(o, hosts.hosts, report); rc != 0) {
    return rc;
  }
  // 5. Print.
  if (o.json) {
    fmt::print("{}\n", doctor_json(report).dump(2));
  } else {
    fmt::print("{}", format_doctor_text(report));
  }
  for (const auto& h : report.hosts) {
    if (!host_problems(h).empty()) return 1;
  }
  return 0;
}

}  // namespace mlrun::doctor
