#include "mpi/launch.h"

#include <utility>  // Boost 1.74's Asio headers use std::exchange without including it.

#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <boost/asio/io_context.hpp>
#include <mlrun/rendezvous.hpp>

#include "launcher/summary.h"
#include "mpi/mpirun.h"
#include "transport/slurm_env.h"
#include "worker/cgroup.h"
#include "worker/hardware.h"
#include "worker/log.h"
#include "worker/net.h"
#include "worker/process.h"

namespace mlrun::mpi {
namespace {

namespace fs = std::filesystem;

// mpirun --tag-output's "[JOB,RANK]<stdout>:text" as mlrun's "[RANK] text"; mpirun's own lines
// as "[mpirun] text".
std::string retag_mpi_line(std::string_view line) {
  std::string out;
  for (const auto& piece : parse_mpi_output_line(line)) {
    if (!out.empty()) out += '\n';
    out += piece.rank >= 0 ? fmt::format("[{}] ", piece.rank) : std::string("[mpirun] ");
    out += piece.text;
  }
  return out;
}

// --store mlrun: where this process serves PyTorch's TCPStore for mpirun's ranks
// (docs/torch-store.md), and who may use it.
struct MpiStore {
  std::string listen = "127.0.0.1";  // Also MASTER_ADDR.
  std::vector<std::string> allow;    // The job's hosts' addresses (loopback always may).
};

// One node: loopback. Hosts: this host's address on the route to the first other one (its
// --master_addr when that is one of this host's addresses); the allow list holds every address
// each host's name resolves to, and the listen address (a rank here connects from it).
MpiStore plan_mpi_store(const Options& o, const LaunchPlan& plan) {
  MpiStore s;
  if (!on_hosts(o)) return s;
  for (const auto& n : plan.hosts.nodes) {
    if (n.local) continue;
    // Under Slurm a node's name may be known to Slurm only (its NodeAddr).
    std::string host = o.launcher == "slurm" ? transport::resolve_node(n.host.host) : n.host.host;
    std::vector<std::string> found = numeric_addresses(host, AF_UNSPEC);
    if (found.empty()) {
      throw std::runtime_error(
          fmt::format("host {} does not resolve here, so its ranks could not be let in: give its "
                      "address, or use --store torch",
                      host));
    }
    if (s.listen == "127.0.0.1") {
      s.listen = !o.master_addr.empty() && is_local_address(o.master_addr)
                     ? o.master_addr
                     : local_address_toward(host);
    }
    s.allow.insert(s.allow.end(), found.begin(), found.end());
  }
  s.allow.push_back(s.listen);
  return s;
}

// The job's hostfile lives in a fresh directory, removed with this object.
struct HostfileDir {
  std::string path;
  HostfileDir() = default;
  HostfileDir(const HostfileDir&) = delete;
  ~HostfileDir() {
    if (path.empty()) return;
    std::error_code ignored;
    fs::remove_all(path, ignored);
  }
  // False, with the error printed, when no directory can be made.
  bool create() {
    std::string dir_template = (fs::temp_directory_path() / "mlrun-mpi-XXXXXX").string();
    if (mkdtemp(dir_template.data()) == nullptr) {
      error(fmt::format("cannot create a directory in {}: {}", fs::temp_directory_path().string(),
                        std::strerror(errno)));
      return false;
    }
    path = dir_template;
    return true;
  }
};

// What every attempt shares: the hosts in rank order, the program and the launcher's environment.
MpiJob job_of(const Options& o, const LaunchPlan& plan) {
  MpiJob job;
  if (on_hosts(o)) {
    for (const auto& n : plan.hosts.nodes) {
      job.hosts.push_back(
          {n.local ? "localhost" : n.host.host, n.nproc, n.local ? count_cpus() : 0});
    }
  } else {
    job.hosts.push_back({"localhost", plan.nproc, count_cpus()});
  }
  job.world_size = plan.world_size;
  job.argv = plan.argv;
  job.base_env = Environment::current().entries();
  job.as_root = geteuid() == 0;
  return job;
}

// MASTER_ADDR for the ranks: the first host (by the name Slurm resolves), or the plan's.
std::string master_of(const Options& o, const LaunchPlan& plan) {
  std::string master = on_hosts(o) && !plan.hosts.nodes.front().local
                           ? plan.hosts.nodes.front().host.host
                           : plan.master_addr;
  // A Slurm node's name may be known to Slurm only (its NodeAddr).
  if (o.launcher == "slurm") master = transport::resolve_node(master);
  return master;
}

// Each attempt's one worker: mpirun, with mlrun's variables travelling by -x; per-rank ones (RANK,
// LOCAL_RANK) come from Open MPI itself as OMPI_COMM_WORLD_*.
struct AttemptPlanner {
  const Options& o;
  const LaunchPlan& plan;
  const MpiJob& job;
  const GroupEnv& g;
  const std::string& master;
  const rendezvous::Server* server;  // --store mlrun: the ranks' TCPStore; null: none
  const std::string& token;

  std::vector<WorkerSpec> operator()(int attempt) const {
    MpiJob attempt_job = job;
    attempt_job.overrides = g.overrides;
    int port = server ? server->port() : o.master_port != 0 ? o.master_port : free_tcp_port();
    if (server) new_key_space(attempt);
    for (const auto& [name, value] : std::vector<std::pair<std::string, std::string>>{
             {"WORLD_SIZE", std::to_string(plan.world_size)},
             {"MASTER_ADDR", master},
             {"MASTER_PORT", std::to_string(port)},
             {"TORCHELASTIC_USE_AGENT_STORE", g.agent_store ? "True" : "False"},
             {"TORCHELASTIC_RESTART_COUNT", std::to_string(attempt)},
             {"TORCHELASTIC_MAX_RESTARTS", std::to_string(o.max_restarts)},
             {"TORCHELASTIC_RUN_ID", g.run_id},
             {"ROLE_NAME", g.role},
             {"MLRUN_JOB_ID", g.job_id},
             {"MLRUN_BACKEND", "mpi"}}) {
      attempt_job.overrides.emplace_back(name, value);
    }
    attempt_job.defaults = g.defaults;
    MpiCommand command = build_mpirun_command(attempt_job);
    write_mpi_hostfile(command);
    return std::vector<WorkerSpec>{{0, 0, SpawnRequest{command.argv, command.env, {}}}};
  }

  // A fresh key space for this attempt before any of its ranks starts: the server drops the
  // previous attempt's keys and connections (its mpirun has ended).
  void new_key_space(int attempt) const {
    rendezvous::ClientOptions options;
    options.job_id = plan.job_id;
    options.connect_timeout = std::chrono::seconds(10);
    auto c = rendezvous::Client::connect(server->endpoint(), token, options);
    c.set(rendezvous::kTorchStoreGenerationKey, std::to_string(attempt));
  }
};

// The summary of an attempt that failed (mpirun names the failed rank in its last lines).
void report_attempt_end(const Options& o, const AttemptResult& r, bool restarting,
                        const std::vector<std::deque<std::string>>& tails) {
  if (!r.plan_error.empty()) {
    error(r.plan_error);
    return;
  }
  if (r.interrupt_signal != 0) {
    fmt::print(stderr, "mlrun: interrupted; mpirun and its ranks stopped\n");
    return;
  }
  if (!r.first_failure) return;
  const WorkerState& w = r.workers[*r.first_failure];
  std::string summary = fmt::format("mlrun: job failed: mpirun (pid {}) ended with {} at {}\n",
                                    w.pid, describe_status(w.wait_status), format_time(w.ended_at));
  if (!tails.empty() && !tails[0].empty()) {
    summary += "  last stderr lines (mpirun names the failed rank):\n";
    for (const auto& line : tails[0]) summary += fmt::format("    | {}\n", line);
  }
  fmt::print(stderr, "{}{}", summary,
             restarting ? fmt::format("mlrun: restarting mpirun ({} of {} restarts)\n",
                                      r.attempt + 1, o.max_restarts)
                        : std::string());
}

}  // namespace

int launch_mpi(const Options& o, const LaunchPlan& plan, Lifeline& lifeline) {
  // 1. The hosts in rank order, a directory for the generated hostfile, and mpirun itself.
  MpiJob job = job_of(o, plan);
  HostfileDir dir;
  if (!dir.create()) return 1;
  job.hostfile_dir = dir.path;
  const char* path = std::getenv("PATH");
  try {
    job.mpirun = resolve_program("mpirun", path ? path : "/usr/bin:/bin");
  } catch (const SpawnError& e) {
    error(fmt::format("--backend=mpi needs Open MPI's mpirun (Debian: openmpi-bin): {}", e.what()));
    return 2;
  }
  // 2. Where the ranks meet. --store mlrun: this process serves the ranks' TCPStore (its
  //    rendezvous server, on the address they reach, for the job's hosts only) and no rank binds
  //    MASTER_PORT. The token stays in this process: the ranks use the TCPStore protocol,
  //    allowed by their address.
  GroupEnv g = env_template(o, plan);
  std::string master = master_of(o, plan);
  std::optional<rendezvous::Server> server;
  const std::string token = random_hex(16);
  if (g.agent_store) {
    try {
      MpiStore store = plan_mpi_store(o, plan);
      rendezvous::ServerOptions so{store.listen, o.master_port, token, plan.job_id};
      so.torch_store = true;
      so.torch_store_allow = store.allow;
      server.emplace(rendezvous::Server::start(std::move(so)));
      master = store.listen;
      log::info("TCPStore for mpirun's ranks served at {}", server->endpoint());
    } catch (const std::exception& e) {
      error(fmt::format("--backend mpi: cannot serve the ranks' TCPStore (--store mlrun): {}",
                        e.what()));
      return 1;
    }
  }
  AttemptPlanner planner{o, plan, job, g, master, server ? &*server : nullptr, token};
  // 3. mpirun as the group's one process, its output re-tagged by rank.
  AgentCallbacks callbacks;
  callbacks.routes = [&](int, const WorkerSpec&) {
    WorkerRoutes r;
    r.out = StreamRoute{STDOUT_FILENO, "", -1, false, retag_mpi_line};
    r.err = StreamRoute{STDERR_FILENO, "", -1, true, retag_mpi_line};
    return r;
  };
  callbacks.on_attempt_end = [&](const AttemptResult& r, bool restarting,
                                 const std::vector<std::deque<std::string>>& tails) {
    report_attempt_end(o, r, restarting, tails);
  };
  boost::asio::io_context io;
  // mpirun and the ranks it starts here are in this node's cgroup, their daemons too.
  std::unique_ptr<JobCgroup> cgroup = make_node_cgroup(plan.job_id, lifeline);
  auto spawner = make_posix_spawner(cgroup.get());
  SupervisorConfig config{o.max_restarts,
                          std::chrono::milliseconds(static_cast<long>(o.grace_period * 1000))};
  Agent agent(io, *spawner, lifeline, planner, config, callbacks);
  return agent.run();
}

}  // namespace mlrun::mpi
