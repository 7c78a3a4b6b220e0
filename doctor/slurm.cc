// `mlrun doctor` inside a Slurm allocation (docs/slurm.md): the job, its nodes, Slurm's version
// and KillWait, and every node's own report, probed through one srun step as the job's agents
// would be started, each node also trying a TCP connect to a rendezvous port served here.
#include <utility>  // Boost 1.74's Asio headers use std::exchange without including it.

#include <sys/wait.h>

#include <cstdlib>
#include <map>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <mlrun/rendezvous.hpp>

#include "doctor/doctor.h"
#include "doctor/impl.h"
#include "hostfiles/slurm_lists.h"
#include "launcher/plan.h"
#include "rendezvous/integer.h"
#include "transport/slurm.h"
#include "transport/slurm_env.h"
#include "worker/process.h"

namespace mlrun::doctor {
namespace {

// srun --label's lines ("  1: text") by task, each task's text joined.
std::map<int, std::string> split_by_task(const std::string& out) {
  std::map<int, std::string> tasks;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    auto start = line.find_first_not_of(' ');
    auto colon = line.find(": ");
    if (start == std::string::npos || colon == std::string::npos || colon <= start) continue;
    if (int task = 0; parse_integer(std::string_view(line).substr(start, colon - start), task)) {
      tasks[task] += line.substr(colon + 2) + "\n";
    }
  }
  return tasks;
}

}  // namespace

int check_slurm_nodes(const DoctorOptions& o, const transport::SlurmEnv& slurm,
                      DoctorReport& report) {
  std::string error;
  auto nodes = expand_slurm_hostlist(slurm.nodelist, &error);
  if (!error.empty()) {
    fmt::print(stderr, "mlrun: error: SLURM_JOB_NODELIST: {}\n", error);
    return 2;
  }
  std::string path = std::getenv("PATH") ? std::getenv("PATH") : "/usr/bin:/bin";
  std::string srun, scontrol;
  try {
    srun = resolve_program("srun", path);
    scontrol = resolve_program("scontrol", path);
  } catch (const SpawnError& e) {
    fmt::print(stderr, "mlrun: error: inside Slurm job {}, but {}\n", slurm.job_id, e.what());
    return 1;
  }
  BoundedRun config = run_bounded({scontrol, "show", "config"}, 10);
  auto c = transport::parse_slurm_config(config.out);
  std::string refused = transport::refuse_slurm_version(c.version);
  report.remote_hosts = fmt::format(
      "Slurm job {}: {} node{} {}; Slurm {}{}, KillWait {} s", slurm.job_id, nodes.size(),
      nodes.size() == 1 ? "" : "s", slurm.nodelist, c.version.empty() ? "?" : c.version,
      refused.empty() ? "" : " (refused: " + refused + ")", c.kill_wait.count());
  // A real rendezvous server, on every address, as a job's head serves it.
  rendezvous::ServerOptions so;
  so.host = "0.0.0.0";
  so.port = o.port;
  so.token = random_hex(16);
  so.job_id = "mlrun-doctor";
  so.log = [](std::string_view) {};
  std::optional<rendezvous::Server> server;
  try {
    server.emplace(rendezvous::Server::start(so));
  } catch (const std::exception& e) {
    fmt::print(stderr, "mlrun: error: cannot serve the rendezvous for the check: {}\n", e.what());
    return 1;
  }
  report.rendezvous_port = server->port();
  // Each node probes toward the address srun ran at (this host), as an agent would.
  std::string probe = fmt::format(
      "exec \"$0\" doctor --json --master_addr \"$SLURM_LAUNCH_NODE_IPADDR\" --connect-test "
      "\"$SLURM_LAUNCH_NODE_IPADDR:{}\" --timeout-ms {} --python-timeout {} --backend {} "
      "--iface {}",
      server->port(), o.timeout_ms, o.python_timeout, shell_quote(o.backend), shell_quote(o.iface));
  std::vector<transport::AgentNode> agent_nodes;
  for (std::size_t i = 0; i < nodes.size(); ++i) agent_nodes.push_back({int(i), nodes[i]});
  auto argv = transport::srun_argv(srun, agent_nodes, {"/bin/sh", "-c", probe, self_path()});
  argv.insert(argv.begin() + 1, "--label");
  const int limit_s = remote_probe_limit_seconds(o);
  BoundedRun r = run_bounded(argv, limit_s, &g_probe_child);
  auto tasks = split_by_task(r.out);
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    HostReport h;
    h.host = nodes[i];
    h.local = false;
    h.via_srun = true;
    try {
      h = host_from_json(nlohmann::json::parse(tasks.at(static_cast<int>(i))).at("hosts").at(0));
      h.local = false;
      h.via_srun = true;
      if (!h.rendezvous_port) h.probe_error = "its mlrun did not report the rendezvous-port check";
    } catch (const std::exception&) {
      h.probe_timed_out = r.timed_out;
      h.probe_error = r.timed_out ? fmt::format("no report within {} s (--probe-timeout)", limit_s)
                                  : fmt::format("task {} of srun gave no report: {}", i,
                                                last_line(r.err.empty() ? r.error : r.err));
    }
    report.hosts.push_back(std::move(h));
  }
  report.remote_status = fmt::format(
      "through one srun step on the allocation's nodes, each probed there within {} s; "
      "rendezvous port {} served on this host for the check",
      limit_s, report.rendezvous_port);
  return 0;
}

}  // namespace mlrun::doctor
