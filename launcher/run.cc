#include "launcher/run.h"

#include <utility>  // Boost 1.74's Asio headers use std::exchange without including it.

#include <fcntl.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include <fmt/format.h>

#include <mlrun/rendezvous.hpp>

#include "launcher/command.h"
#include "launcher/node.h"
#include "launcher/options.h"
#include "launcher/summary.h"
#include "worker/agent.h"
#include "worker/env.h"
#include "worker/hardware.h"
#include "worker/net.h"
#include "worker/network.h"

namespace mlrun {
namespace {

namespace fs = std::filesystem;

constexpr const char* kVersion = "0.1.0";

std::string random_hex(std::size_t bytes) {
  std::string raw(bytes, '\0');
  std::size_t got = 0;
  while (got < bytes) {
    ssize_t n = getrandom(raw.data() + got, bytes - got, 0);
    if (n > 0) got += static_cast<std::size_t>(n);
  }
  std::string out;
  for (unsigned char c : raw) out += fmt::format("{:02x}", c);
  return out;
}

void error(std::string_view message) {
  fmt::print(stderr, "mlrun: error: {}\n", message);
}

// The job as planned for this node, before anything starts.
struct LaunchPlan {
  int nproc = 1;
  int world_size = 1;
  std::vector<std::string> argv;
  std::string master_addr;
  std::string backend;
  std::string job_id;
  std::string run_id;
  std::string log_dir;  // Empty: no log files.
  std::string hostname;
  std::vector<std::pair<std::string, std::string>> exports;
  InterfaceChoice iface;
  std::vector<std::pair<std::string, std::string>> network_defaults;
};

std::string choose_backend(const std::string& requested) {
  if (requested != "auto") return requested;
  return count_gpus() > 0 && nccl_available() ? "nccl" : "gloo";
}

// Collects every user error of the command line and the environment before anything runs.
bool plan_launch(const Options& o, LaunchPlan& plan) {
  std::vector<std::string> errors;
  if (!o.hostfile.empty() || !o.hosts.empty()) {
    errors.push_back(
        "launching on several hosts from one command (--hostfile, -H) is not supported yet");
  }
  if (o.nnodes_min != o.nnodes_max) {
    errors.push_back(fmt::format("--nnodes={}:{}: elastic jobs are not supported yet", o.nnodes_min,
                                 o.nnodes_max));
  }
  if (o.backend == "mpi") errors.push_back("--backend=mpi is not supported yet");
  try {
    plan.nproc = resolve_nproc_per_node(o.nproc_per_node);
  } catch (const std::exception& e) {
    errors.push_back(e.what());
  }
  if (o.np > 0 && o.np != plan.nproc) {
    if (o.nproc_per_node == "1") {
      plan.nproc = o.np;  // A single node: -np is the worker count.
    } else {
      errors.push_back(fmt::format("-np {} does not match --nproc_per_node={} on one node", o.np,
                                   o.nproc_per_node));
    }
  }
  const char* python = std::getenv("PYTHON");
  const char* path = std::getenv("PATH");
  try {
    plan.argv = worker_command(o, python && *python ? python : "python3",
                               path ? path : "/usr/local/bin:/usr/bin:/bin");
  } catch (const SpawnError& e) {
    errors.push_back(e.what());
  }
  for (const auto& x : o.exports) {
    auto eq = x.find('=');
    if (eq != std::string::npos) {
      plan.exports.emplace_back(x.substr(0, eq), x.substr(eq + 1));
    } else if (const char* v = std::getenv(x.c_str())) {
      plan.exports.emplace_back(x, v);
    } else {
      errors.push_back(fmt::format("-x {}: no such variable in mlrun's environment", x));
    }
  }
  plan.master_addr = o.master_addr.empty() ? "127.0.0.1" : o.master_addr;
  auto interfaces = list_interfaces();
  if (o.iface == "auto") {
    plan.iface = choose_interface(interfaces, plan.master_addr);
  } else if (std::none_of(interfaces.begin(), interfaces.end(),
                          [&](const NetInterface& i) { return i.name == o.iface && i.up; })) {
    errors.push_back(
        fmt::format("--iface={}: no such interface is up on {}", o.iface, host_name()));
  } else {
    plan.iface = {o.iface, fmt::format("{}: chosen with --iface", o.iface), {}};
  }
  for (const auto& e : errors) error(e);
  if (!errors.empty()) return false;
  if (!plan.iface.warning.empty()) fmt::print(stderr, "mlrun: warning: {}\n", plan.iface.warning);
  plan.network_defaults = network_variables(plan.iface.name, has_infiniband_device());
  // Every node runs as many workers as this one when the nodes are launched one by one; the
  // real world size comes from the rendezvous.
  plan.world_size = plan.nproc * o.nnodes_max;
  plan.backend = choose_backend(o.backend);
  // Nodes started one by one share nothing but their command lines: their job id is
  // torchrun's --rdzv_id (default "none"), the same on every node.
  plan.job_id = !o.rdzv_id.empty() ? o.rdzv_id : o.nnodes_max > 1 ? "none" : random_hex(6);
  plan.run_id = o.rdzv_id.empty() ? (o.standalone ? plan.job_id : "none") : o.rdzv_id;
  plan.hostname = host_name();
  plan.log_dir = o.log_dir;
  bool wants_files =
      o.redirects.all || !o.redirects.per_rank.empty() || o.tee.all || !o.tee.per_rank.empty();
  if (plan.log_dir.empty() && wants_files) {
    plan.log_dir = fmt::format("{}/mlrun-logs-{}", fs::temp_directory_path().string(), plan.job_id);
    fmt::print(stderr, "mlrun: logs in {}\n", plan.log_dir);
  }
  return true;
}

// The workers' environment that is the same on every node and in every attempt.
GroupEnv env_template(const Options& o, const LaunchPlan& plan) {
  GroupEnv g;
  g.nnodes = o.nnodes_max;
  g.local_world_size = plan.nproc;
  g.world_size = plan.world_size;
  g.master_addr = plan.master_addr;
  g.max_restarts = o.max_restarts;
  g.run_id = plan.run_id;
  g.role = o.role;
  g.job_id = plan.job_id;
  g.backend = plan.backend;
  g.overrides = plan.exports;
  g.defaults = plan.network_defaults;
  // PyTorch 1.x and 2.x names for NCCL's asynchronous error handling, as torchrun sets them.
  g.defaults.emplace_back("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
  g.defaults.emplace_back("NCCL_ASYNC_ERROR_HANDLING", "1");
  return g;
}

std::string error_file(const std::string& dir, int attempt, int rank) {
  return fmt::format("{}/attempt_{}/{}/error.json", dir, attempt, rank);
}

void print_dry_run(const Options& o, const LaunchPlan& plan) {
  GroupEnv g = env_template(o, plan);
  g.node_rank = o.node_rank;
  g.rank_offset = o.node_rank * plan.nproc;
  g.master_port = o.master_port;
  fmt::print("mlrun: dry run: 1 node, {} worker{}, world size {}, backend {}\n", plan.nproc,
             plan.nproc == 1 ? "" : "s", plan.world_size, plan.backend);
  fmt::print("node 0 ({}): ranks 0-{}, interface {}\n", plan.hostname, plan.nproc - 1,
             plan.iface.reason);
  Environment empty;
  for (int lr = 0; lr < plan.nproc; ++lr) {
    fmt::print("  rank {} (local rank {}): {}\n", lr, lr, fmt::join(plan.argv, " "));
    for (const auto& kv : worker_environment(empty, g, lr, error_file("LOG_DIR", 0, lr))) {
      if (kv.rfind("MLRUN_RDZV_TOKEN=", 0) == 0) {
        fmt::print("    MLRUN_RDZV_TOKEN=(secret)\n");
      } else {
        fmt::print("    {}\n", kv);
      }
    }
  }
}

int open_log(const std::string& path) {
  return open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_APPEND, 0644);
}

WorkerRoutes routes_for(const Options& o, const LaunchPlan& plan, const std::string& run_dir,
                        int attempt, const WorkerSpec& w) {
  WorkerRoutes r;
  int redirected = o.redirects.for_local_rank(w.local_rank);
  int teed = o.tee.for_local_rank(w.local_rank);
  bool shown =
      !o.local_ranks_filter || std::find(o.local_ranks_filter->begin(), o.local_ranks_filter->end(),
                                         w.local_rank) != o.local_ranks_filter->end();
  // torchrun's console prefix where its --tee is used, mlrun's "[rank] " otherwise.
  std::string prefix = (o.tee.all || !o.tee.per_rank.empty())
                           ? fmt::format("[{}{}]:", o.role, w.local_rank)
                           : fmt::format("[{}] ", w.rank);
  auto route = [&](int stream_bit, int console_fd, const char* file) {
    StreamRoute s;
    if (shown && (!(redirected & stream_bit) || (teed & stream_bit))) s.console_fd = console_fd;
    s.prefix = prefix;
    s.keep_tail = stream_bit == 2;
    if (!plan.log_dir.empty()) {
      s.file_fd = open_log(fmt::format("{}/attempt_{}/{}/{}", run_dir, attempt, w.rank, file));
    }
    return s;
  };
  r.out = route(1, STDOUT_FILENO, "stdout.log");
  r.err = route(2, STDERR_FILENO, "stderr.log");
  return r;
}

// Where this node's rendezvous is and whether this launcher serves it.
struct RendezvousPlan {
  bool serve = false;
  std::string listen_host;
  int port = 0;
  std::string endpoint;  // Empty while serve with port 0: known once the server listens.
  std::string token;
};

RendezvousPlan plan_rendezvous(const Options& o, const LaunchPlan& plan) {
  RendezvousPlan r;
  const char* token = std::getenv("MLRUN_RDZV_TOKEN");
  if (o.nnodes_max == 1) {
    // One node: a private server on loopback, on any port, with a fresh secret.
    r.serve = true;
    r.listen_host = "127.0.0.1";
    r.token = random_hex(16);
    return r;
  }
  // Several nodes, each started by the user: they share no channel for a secret, so the token
  // is MLRUN_RDZV_TOKEN when the user exports one on every node, else derived from the job id
  // and the endpoint (which keeps strangers' jobs apart but is no secret; docs/multinode.md).
  if (!o.rdzv_endpoint.empty()) {
    split_endpoint(o.rdzv_endpoint, r.listen_host, r.port);
    r.endpoint = o.rdzv_endpoint;
  } else {
    r.port = o.master_port != 0 ? o.master_port : 29500;
    r.endpoint = fmt::format("{}:{}", plan.master_addr, r.port);
  }
  // Static: node 0 serves. Dynamic: whichever node owns the endpoint's address serves.
  if (o.rdzv_endpoint.empty()) {
    r.serve = o.node_rank == 0;
  } else {
    std::string host;
    int port;
    split_endpoint(o.rdzv_endpoint, host, port);
    try {
      std::string local = local_address_toward(host);
      r.serve = local == host || host == "localhost" || host == host_name() ||
                local.rfind("127.", 0) == 0;
    } catch (const std::exception&) {
      r.serve = false;
    }
  }
  r.listen_host = "0.0.0.0";
  r.token =
      token != nullptr && *token != '\0'
          ? token
          : fmt::format("mlrun-derived:{}@{}", o.rdzv_id.empty() ? "none" : o.rdzv_id, r.endpoint);
  return r;
}

// The launch of this node's part of a job, as named steps.
int launch(const Options& o) {
  // 1. Plan: program, worker count, backend, every user error reported before anything runs.
  LaunchPlan plan;
  if (!plan_launch(o, plan)) return 2;
  // 2. A dry run prints the plan and starts nothing.
  if (o.dry_run) {
    print_dry_run(o, plan);
    return 0;
  }
  // 3. The lifeline, forked while this process has one thread, cleans up if we are SIGKILLed.
  Lifeline lifeline = Lifeline::start();
  // Ignore SIGPIPE: a closed terminal must not kill the launcher before it stops its workers.
  signal(SIGPIPE, SIG_IGN);
  // 4. A directory for error files, and log files when asked for; a temporary one is removed.
  bool temporary_dir = plan.log_dir.empty();
  std::string run_dir = plan.log_dir;
  if (temporary_dir) {
    std::string tmpl = (fs::temp_directory_path() / "mlrun-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) {
      error(fmt::format("cannot create a directory in {}: {}", fs::temp_directory_path().string(),
                        std::strerror(errno)));
      return 1;
    }
    run_dir = tmpl;
  }
  struct RemoveRunDir {
    bool temporary;
    const std::string& dir;
    ~RemoveRunDir() {
      std::error_code ignored;
      if (temporary) fs::remove_all(dir, ignored);
    }
  } remove_run_dir{temporary_dir, run_dir};
  // 5. The rendezvous: this launcher serves it (one node; node 0 or the endpoint's owner of a
  //    multi-node job), or joins another node's.
  RendezvousPlan rdzv = plan_rendezvous(o, plan);
  std::optional<rendezvous::Server> server;
  if (rdzv.serve) {
    try {
      server.emplace(rendezvous::Server::start(
          rendezvous::ServerOptions{rdzv.listen_host, rdzv.port, rdzv.token, plan.job_id}));
    } catch (const std::exception& e) {
      error(fmt::format("cannot serve the rendezvous on {}:{}: {}", rdzv.listen_host, rdzv.port,
                        e.what()));
      return 1;
    }
    if (rdzv.endpoint.empty()) rdzv.endpoint = server->endpoint();
  }
  // 6. Run this node's workers for every attempt: join, spawn, route output, stop everyone on
  //    the first failure anywhere, restart while restarts remain.
  NodeJob job;
  job.endpoint = rdzv.endpoint;
  job.token = rdzv.token;
  job.job_id = plan.job_id;
  job.nnodes = o.nnodes_max;
  job.node_rank = o.nnodes_max == 1 || o.rdzv_endpoint.empty() ? o.node_rank : -1;
  job.nproc = plan.nproc;
  job.master_addr = plan.master_addr;
  job.master_port = o.nnodes_max == 1 ? o.master_port : 0;
  job.argv = plan.argv;
  job.env = env_template(o, plan);
  job.max_restarts = o.max_restarts;
  job.grace = std::chrono::milliseconds(static_cast<long>(o.grace_period * 1000));
  job.host = plan.hostname;
  NodeHooks hooks;
  hooks.routes = [&](int attempt, const WorkerSpec& w) {
    return routes_for(o, plan, run_dir, attempt, w);
  };
  hooks.error_file = [&](int attempt, int rank) {
    std::error_code ignored;
    fs::create_directories(fmt::format("{}/attempt_{}/{}", run_dir, attempt, rank), ignored);
    return error_file(run_dir, attempt, rank);
  };
  hooks.error_message = [&](int attempt, int rank) {
    return read_error_file_message(error_file(run_dir, attempt, rank));
  };
  try {
    return run_node(job, hooks, lifeline, -1);
  } catch (const std::exception& e) {
    error(e.what());
    return 1;
  }
}

using Subcommand = int (*)(const std::vector<std::string>&);

int launch_command(const std::vector<std::string>& args) {
  ParseResult parsed = parse_options(args);
  if (parsed.options.help) {
    fmt::print("{}", usage());
    return 0;
  }
  if (parsed.options.version) {
    fmt::print("mlrun {}\n", kVersion);
    return 0;
  }
  for (const auto& e : parsed.errors) error(e.message);
  if (!parsed.errors.empty()) return 2;
  return launch(parsed.options);
}

}  // namespace

int mlrun_main(const std::vector<std::string>& args) {
  return launch_command(args);
}

}  // namespace mlrun
