#include "launcher/run.h"

#include <utility>  // Boost 1.74's Asio headers use std::exchange without including it.

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include <mlrun/rendezvous.hpp>

#include "doctor/doctor.h"
#include "launcher/agent_command.h"
#include "launcher/launch_hosts.h"
#ifdef MLRUN_HAVE_RDZV_COMMAND
#include "launcher/rdzv_command.h"
#endif
#include "launcher/this_node.h"
#include "mpi/launch.h"
#include "transport/local.h"
#include "transport/slurm.h"
#include "transport/slurm_env.h"
#include "worker/log.h"
#include "worker/net.h"
#include "worker/signals.h"

namespace mlrun {
namespace {

constexpr const char* kVersion = "0.1.0";

// Where this node's rendezvous is and whether this launcher serves it.
struct RendezvousPlan {
  bool serve = false;
  std::string listen_host;
  int port = 0;
  std::string endpoint;  // Empty while serve with port 0: known once the server listens.
  std::string token;
  // Why this host, the endpoint's, could not serve it and joins instead (another process has the
  // port); said while the node waits, since then nothing may serve it at all.
  std::string serve_failed;
};

// The address to serve a multi-node rendezvous on: the endpoint's own address when it is this
// host's (so that only the job's network reaches it), else every interface, said at start.
std::string bind_address_for(const std::string& host) {
  std::vector<std::string> found = numeric_addresses(host, AF_INET);
  if (found.empty()) return "0.0.0.0";
  const std::string& address = found.front();
  return address.rfind("127.", 0) == 0 || is_local_address(address) ? address : "0.0.0.0";
}

// The token of nodes started one by one: they share no channel for a secret, so it is the one
// the user gives every node (MLRUN_RDZV_TOKEN, or the file MLRUN_RDZV_TOKEN_FILE names), else
// derived from the job id and the endpoint, which keeps strangers' jobs apart but is no secret:
// then every node says so (docs/multinode.md).
std::string shared_token(const Options& o, const std::string& endpoint) {
  const char* file = std::getenv("MLRUN_RDZV_TOKEN_FILE");
  const char* env = std::getenv("MLRUN_RDZV_TOKEN");
  std::string token, why;
  if (file != nullptr && *file != '\0') {
    token = read_token_file(file, why);
    if (!why.empty()) fmt::print(stderr, "mlrun: warning: MLRUN_RDZV_TOKEN_FILE {}\n", why);
  } else if (env != nullptr && *env != '\0') {
    token = env;
  }
  if (!token.empty()) {
    if (auto weak = weak_token(token)) fmt::print(stderr, "mlrun: warning: {}\n", *weak);
    return token;
  }
  fmt::print(stderr,
             "mlrun: warning: the rendezvous token is derived from the job id and the endpoint "
             "{}: it is weak, anyone who reaches that address can compute it and join or abort "
             "the job; give every node the same MLRUN_RDZV_TOKEN (or MLRUN_RDZV_TOKEN_FILE) to "
             "make it strong\n",
             endpoint);
  return fmt::format("mlrun-derived:{}@{}", o.rdzv_id.empty() ? "none" : o.rdzv_id, endpoint);
}

// Why the rendezvous could not be served on listen_host:port, said once for both cases below; a
// port in use is most often another job's on the same host (both on torchrun's 29500).
std::string serve_error(const RendezvousPlan& r, const std::exception& e) {
  std::string what = e.what();
  bool in_use = what.find("Address already in use") != std::string::npos;
  return fmt::format("cannot serve the rendezvous on {}:{}: {}{}", r.listen_host, r.port, what,
                     in_use ? " (another process has that port, perhaps another job on this "
                              "host: give another --master_port, the same on every node)"
                            : "");
}

RendezvousPlan plan_rendezvous(const Options& o, const LaunchPlan& plan) {
  RendezvousPlan r;
  if (o.nnodes_max == 1) {
    // One node: a private server on loopback, with a fresh secret; on --master_port when it is
    // also PyTorch's store (as torchrun's agent store is), else on any free port.
    r.serve = true;
    r.listen_host = "127.0.0.1";
    if (o.store == "mlrun") r.port = o.master_port;
    r.token = random_hex(16);
    return r;
  }
  // Several nodes, each started by the user (their token: shared_token).
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
  // The job's interface where this node owns the endpoint's address (the TCPStore protocol has
  // no authentication, docs/torch-store.md; a stranger should not even reach mlrun's).
  std::string endpoint_host;
  int endpoint_port;
  split_endpoint(r.endpoint, endpoint_host, endpoint_port);
  r.listen_host = bind_address_for(endpoint_host);
  r.token = shared_token(o, r.endpoint);
  return r;
}

// A node started by hand (torchrun style, a Kubeflow pod) whose own plan failed: the other nodes
// would wait for it up to the join timeout. It aborts the job through the rendezvous with its
// errors, so that every node ends at once saying why, within kTellBound (or the join timeout, if
// shorter): a node that joins waits that long for the server (its node may start later); node 0
// (the endpoint's owner) serves the rendezvous that long only to answer every join with the
// abort, and ends as soon as every other node has been told. An elastic job goes on without
// this node; the per-node Slurm mode ends its step instead (end_step_early).
constexpr std::chrono::seconds kTellBound{30};

// Node 0's part: true when it served (told everyone or waited out its bound), false when
// another process already serves the endpoint (then it joins that one's, as the others do).
bool tell_by_serving(const Options& o, const RendezvousPlan& r, const std::string& job_id,
                     const std::string& reason, std::chrono::milliseconds bound) {
  std::optional<rendezvous::Server> server;
  try {
    server.emplace(rendezvous::Server::start({r.listen_host, r.port, r.token, job_id}));
  } catch (const rendezvous::ConnectionError& e) {
    if (!o.rdzv_endpoint.empty()) return false;  // Another node on the endpoint's host serves.
    fmt::print(stderr,
               "mlrun: warning: could not serve the rendezvous to abort the job ({}): the "
               "other nodes wait for this one up to the join timeout\n",
               e.what());
    return true;
  }
  server->abort(reason);
  const std::size_t others = static_cast<std::size_t>(o.nnodes_max - 1);
  fmt::print(stderr,
             "mlrun: serving the rendezvous on {}:{} up to {} s only to abort the job, so that the "
             "other nodes do not wait for this one\n",
             r.listen_host, server->port(), bound.count() / 1000);
  auto deadline = std::chrono::steady_clock::now() + bound;
  while (server->aborted_joins() < others && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (std::size_t told = server->aborted_joins(); told < others) {
    fmt::print(stderr,
               "mlrun: warning: {} of the {} other nodes joined in {} s and were told; the rest "
               "wait for this one up to the join timeout\n",
               told, others, bound.count() / 1000);
  }
  return true;
}

void tell_the_other_nodes(const Options& o, const LaunchPlan& plan) {
  if (o.nnodes_max < 2 || o.nnodes_min != o.nnodes_max || on_hosts(o) || !o.slurm_step.empty()) {
    return;
  }
  RendezvousPlan r = plan_rendezvous(o, plan);
  const std::string who =
      o.rdzv_endpoint.empty() ? fmt::format("node {} ({})", o.node_rank, host_name()) : host_name();
  std::string reason =
      fmt::format("{} cannot start: {}", who, first_error_reason(plan.node_errors));
  const auto bound = std::min<std::chrono::milliseconds>(kTellBound, plan.rdzv.join_timeout);
  const std::string job_id =
      o.rdzv_id.empty() ? "none" : o.rdzv_id;  // finish_plan's, for these nodes.
  if (r.serve && tell_by_serving(o, r, job_id, reason, bound)) return;
  rendezvous::ClientOptions options;
  options.job_id = job_id;
  options.connect_timeout = bound;
  options.timeout = std::chrono::seconds(10);
  fmt::print(stderr,
             "mlrun: aborting the job through the rendezvous at {}, so that the other "
             "nodes do not wait for this one\n",
             r.endpoint);
  try {
    rendezvous::Client::connect(r.endpoint, r.token, options).abort(reason);
  } catch (const rendezvous::AbortedError&) {
    // Aborted already: the others know.
  } catch (const rendezvous::Error& e) {
    fmt::print(stderr,
               "mlrun: warning: could not abort the job ({}): the other nodes wait for "
               "this one up to the join timeout\n",
               e.what());
  }
}

// Whether this launcher starts processes of its own: its workers, or mpirun; not a head whose
// every node is another host's (or a simulated node's) agent.
bool runs_processes_here(const Options& o, const LaunchPlan& plan) {
  if (!on_hosts(o) || o.backend == "mpi") return true;
  return std::any_of(plan.hosts.nodes.begin(), plan.hosts.nodes.end(),
                     [](const NodePlan& n) { return n.local; });
}

// Serves the rendezvous of rdzv.serve; false (said, and a per-node Slurm step ended) when it
// cannot.
bool serve_rendezvous(const Options& o, const LaunchPlan& plan, RendezvousPlan& rdzv,
                      std::optional<rendezvous::Server>& server) {
  // Every node holds four connections here (docs/scale.md, "Descriptors"), this node's workers
  // a few pipes each.
  auto nodes = static_cast<std::size_t>(o.nnodes_max);
  if (nodes > 1 && !descriptor_limit_allows(descriptors_besides() + 4 * nodes +
                                                4 * static_cast<std::size_t>(plan.nproc),
                                            nodes, "this node's workers'")) {
    transport::end_step_early(o);
    return false;
  }
  try {
    rendezvous::ServerOptions so{rdzv.listen_host, rdzv.port, rdzv.token, plan.job_id};
    so.torch_store = o.store == "mlrun";
    so.log_client_aborts = log::enabled(log::Level::debug);  // This node says the reason.
    server.emplace(rendezvous::Server::start(std::move(so)));
  } catch (const rendezvous::ConnectionError& e) {
    // Joining by endpoint, several nodes may share the endpoint's host: the first to listen
    // serves, the others join it (as torchrun's c10d does).
    if (o.rdzv_endpoint.empty()) {
      error(serve_error(rdzv, e));
      transport::end_step_early(o);
      return false;
    }
    rdzv.serve_failed = e.what();
  } catch (const std::exception& e) {
    error(serve_error(rdzv, e));
    transport::end_step_early(o);
    return false;
  }
  if (server && rdzv.endpoint.empty()) rdzv.endpoint = server->endpoint();
  if (server && o.nnodes_max > 1) {
    fmt::print(stderr, "mlrun: serving the rendezvous on {}:{}{}\n", rdzv.listen_host,
               server->port(),
               rdzv.listen_host == "0.0.0.0" ? " (every interface: the endpoint's host is "
                                               "not one of this host's addresses)"
                                             : "");
  }
  return true;
}

// This node's part of the job, for the coordinator.
NodeJob node_job(const Options& o, const LaunchPlan& plan, const RendezvousPlan& rdzv,
                 bool serves) {
  NodeJob job;
  job.endpoint = rdzv.endpoint;
  job.token = rdzv.token;
  job.job_id = plan.job_id;
  job.nnodes = o.nnodes_max;
  job.node_rank = o.nnodes_max == 1 || o.rdzv_endpoint.empty() ? o.node_rank : -1;
  job.nproc = plan.nproc;
  // No head reports this node's end: a SIGKILL here must not leave the others waiting for it.
  job.lost_on_close = true;
  // One node: loopback unless told. Several: the user's --master_addr, else node 0's own
  // address on its route to the rendezvous (whichever node that turns out to be).
  job.master_addr = o.nnodes_max == 1 ? plan.master_addr : o.master_addr;
  job.master_port = o.nnodes_max == 1 ? o.master_port : 0;
  const RdzvConf& conf = plan.rdzv;
  job.join_timeout = conf.join_timeout;
  // A node that joins another's rendezvous waits for it as long as for the join (its node may
  // start later: a Kubeflow pod scheduled after this one), not the client's default minute.
  if (!serves) job.connect_timeout = conf.join_timeout;
  // Node 0 of a per-node step that died before it served (a crash: a failure it reports ends
  // the step, end_step_early) leaves the others waiting; Slurm does not tell them.
  if (!serves && !o.slurm_step.empty()) {
    job.waiting_hint =
        fmt::format("; node 0 of Slurm step {} serves it: if it ended, `scancel {}` ends this wait",
                    o.slurm_step, o.slurm_step);
  }
  if (!serves && !rdzv.serve_failed.empty()) {
    job.waiting_hint += fmt::format(
        "; this host is the endpoint's but could not serve it ({}), so it joins whoever does: if "
        "no other mlrun on this host serves it, free port {} or give another --rdzv_endpoint",
        rdzv.serve_failed, rdzv.port);
  }
  job.nnodes_min = o.nnodes_min;
  job.last_call = conf.last_call;
  job.heartbeat_interval = conf.heartbeat_interval;
  job.heartbeat_timeout = conf.heartbeat_timeout;
  job.serves_rendezvous = serves;
  return job;
}

// The launch of this node's part of a job, as named steps.
int launch(const Options& o, std::vector<std::string> option_errors) {
  // 1. Plan: program, worker count, backend, every user error reported before anything runs.
  //    A node started by hand whose own plan fails (a program missing on it; not the command
  //    line, the same on every node) ends the job: the others would wait for it.
  LaunchPlan plan;
  if (!plan_launch(o, plan, std::move(option_errors))) {
    if (!plan.node_errors.empty()) {
      transport::end_step_early(o);
      tell_the_other_nodes(o, plan);
    }
    return 2;
  }
  // 2. A dry run prints the plan and starts nothing.
  if (o.dry_run) {
    on_hosts(o) ? print_host_plan(o, plan) : print_dry_run(o, plan);
    return 0;
  }
  // 3. The lifeline, forked while this process has one thread, cleans up if we are SIGKILLed.
  //    Before it, SIGUSR1/SIGUSR2 lose their default action (ending the process) in both.
  //    A head that runs no process here (Slurm; a hostfile that does not list this host;
  //    --launcher sim) gives it nothing to clean up: each agent's own lifeline, and the end of
  //    its srun step, SSH channel or stdin, cover the head's death. It starts none (its spawn
  //    was ~1-3 ms of the Slurm head's start before srun; docs/launcher.md, "Start-up").
  keep_forwarded_signals_harmless(plan.signals);
  // Ctrl-Z for a job of one node, on this (the user's) launcher; never an agent's.
  plan.signals.job_control = o.nnodes_max == 1 && !on_hosts(o) && !sigtstp_ignored();
  Lifeline lifeline = runs_processes_here(o, plan) ? Lifeline::start() : Lifeline();
  // Ignore SIGPIPE: a closed terminal must not kill the launcher before it stops its workers.
  signal(SIGPIPE, SIG_IGN);
  if (o.backend == "mpi") return mpi::launch_mpi(o, plan, lifeline);
  if (on_hosts(o)) return launch_on_hosts(o, plan, lifeline);
  // 4. The rendezvous: this launcher serves it (one node; node 0 or the endpoint's owner of a
  //    multi-node job), or joins another node's.
  RendezvousPlan rdzv = plan_rendezvous(o, plan);
  std::optional<rendezvous::Server> server;
  if (rdzv.serve && !serve_rendezvous(o, plan, rdzv, server)) return 1;
  // 5. Run this node's workers for every attempt: join, spawn, route output, stop everyone on
  //    the first failure anywhere, restart while restarts remain.
  NodeJob job = node_job(o, plan, rdzv, server.has_value());
  return run_this_node(o, plan, job, lifeline, -1);
}

// `mlrun [options] program`: the options, the log, where the nodes come from, then launch().
int launch_command(const std::vector<std::string>& args) {
  ParseResult parsed =
      parse_options(args, [](const std::string& name) { return std::getenv(name.c_str()); });
  if (parsed.options.help) {
    fmt::print("{}", usage());
    return 0;
  }
  if (parsed.options.version) {
    fmt::print("mlrun {}\n", kVersion);
    return 0;
  }
  std::vector<std::string> errors;
  for (auto& e : parsed.errors) errors.push_back(std::move(e.message));
  std::string level_error;
  log::init(log::choose_level(parsed.options.log_level, parsed.options.verbose, &level_error),
            host_name());
  if (!level_error.empty()) errors.push_back(std::move(level_error));
  // Where the nodes come from: the command line, a Slurm allocation or step, or this host.
  auto chosen = parsed.options.launcher == "sim"
                    ? transport::choose_sim_launcher(parsed.options)
                    : transport::choose_launcher(parsed.options, transport::read_slurm_env(),
                                                 transport::resolve_node);
  for (auto& e : chosen) {
    errors.push_back(std::move(e));
  }
  return launch(parsed.options, std::move(errors));
}

struct Subcommand {
  std::string_view name;
  int (*run)(const std::vector<std::string>& args);
};

constexpr Subcommand kSubcommands[] = {
    {"doctor", doctor::doctor_command},
    {"agent", agent_command},
#ifdef MLRUN_HAVE_RDZV_COMMAND
    {"rdzv", rdzv_command},
#endif
};

}  // namespace

int mlrun_main(const std::vector<std::string>& args) {
  // A closed 0, 1 or 2 (`mlrun ... >&- 2>&-`) would be taken by the next descriptor opened: a
  // pipe to the lifeline or an eventfd would get the workers' output and mlrun's errors, a file
  // rank 0's stdin. /dev/null holds each place, as a daemon's start does.
  for (int fd : {STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO}) {
    if (fcntl(fd, F_GETFD) < 0) open("/dev/null", fd == STDIN_FILENO ? O_RDONLY : O_WRONLY);
  }
  // Subcommands take the level from the environment (an error there is the launch's to report).
  log::init(log::choose_level("", 0, nullptr), host_name());
  if (!args.empty()) {
    for (const auto& sub : kSubcommands) {
      if (args[0] == sub.name) return sub.run({args.begin() + 1, args.end()});
    }
  }
  return launch_command(args);
}

}  // namespace mlrun
