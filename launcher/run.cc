#include "launcher/run.h"

#include <utility>  // Boost 1.74's Asio headers use std::exchange without including it.

#include <fcntl.h>
#include <signal.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <optional>

#include <fmt/format.h>

#include <mlrun/rendezvous.hpp>

#include <nlohmann/json.hpp>

#include "doctor/doctor.h"
#include "launcher/command.h"
#include "launcher/head.h"
#include "launcher/log_dir.h"
#ifdef MLRUN_HAVE_RDZV_COMMAND
#include "launcher/rdzv_command.h"
#endif
#include "coordinator/node.h"
#include "launcher/options.h"
#include "launcher/plan.h"
#include "launcher/signal_relay.h"
#include "launcher/summary.h"
#include "mpi/launch.h"
#include "transport/local.h"
#include "transport/slurm.h"
#include "transport/slurm_env.h"
#include "transport/ssh.h"
#include "transport/tree_agent.h"
#include "worker/agent.h"
#include "worker/cgroup.h"
#include "worker/env.h"
#include "worker/hardware.h"
#include "worker/log.h"
#include "worker/net.h"
#include "worker/network.h"
#include "worker/output.h"
#include "worker/signals.h"

namespace mlrun {
namespace {

namespace fs = std::filesystem;

constexpr const char* kVersion = "0.1.0";

// Where this node's rendezvous is and whether this launcher serves it.
struct RendezvousPlan {
  bool serve = false;
  std::string listen_host;
  int port = 0;
  std::string endpoint;  // Empty while serve with port 0: known once the server listens.
  std::string token;
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

// Where a run's temporary files go: $XDG_RUNTIME_DIR, /dev/shm, then $TMPDIR or /tmp.
std::string temporary_base_dir() {
  for (const char* candidate : {static_cast<const char*>(std::getenv("XDG_RUNTIME_DIR")),
                                static_cast<const char*>("/dev/shm")}) {
    if (candidate != nullptr && *candidate != '\0' && access(candidate, W_OK | X_OK) == 0) {
      return candidate;
    }
  }
  return fs::temp_directory_path().string();
}

// Runs this node's workers in a job whose rendezvous is known (job: endpoint, token, job id,
// nnodes, node rank); the rest of job comes from the plan. Returns the exit code.
int run_this_node(const Options& o, const LaunchPlan& plan, NodeJob job, Lifeline& lifeline,
                  int lifeline_fd) {
  // A directory for error files, and log files when asked for; a temporary one is removed.
  bool temporary_dir = !plan.log_files;
  std::string run_dir;
  if (plan.log_files) {
    std::string why;
    run_dir = prepare_log_dir(plan.log_dir, plan.job_id, why);
    if (run_dir.empty()) {
      error(why);
      return 1;
    }
    if (plan.log_dir.empty()) fmt::print(stderr, "mlrun: logs in {}\n", run_dir);
  } else {
    // Only error files go here: a flat directory on a memory file system where there is one.
    // (Per-rank directories on a disk mounted with `discard` cost milliseconds each to delete.)
    std::string base = temporary_base_dir();
    std::string tmpl = base + "/mlrun-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) {
      error(fmt::format("cannot create a directory in {}: {}", base, std::strerror(errno)));
      return 1;
    }
    run_dir = tmpl;
    lifeline.remove_on_exit(run_dir);
  }
  struct RemoveRunDir {
    bool temporary;
    const std::string& dir;
    ~RemoveRunDir() {
      std::error_code ignored;
      if (temporary) fs::remove_all(dir, ignored);
    }
  } remove_run_dir{temporary_dir, run_dir};
  job.argv = plan.argv;
  job.env = env_template(o, plan);
  job.env.nnodes = job.nnodes;
  job.max_restarts = o.max_restarts;
  job.grace = std::chrono::milliseconds(static_cast<long>(o.grace_period * 1000));
  job.host = plan.hostname;
  job.signals = plan.signals;
  job.numa = plan.numa;
  // An agent's stdin is the head's lifeline, never a worker's: remote ranks read /dev/null.
  job.stdin_to_rank0 = lifeline_fd < 0 && o.stdin_mode != "none";
  NodeHooks hooks;
  hooks.routes = [&](int attempt, const WorkerSpec& w) {
    return routes_for(o, plan, run_dir, attempt, w);
  };
  auto error_path = [&](int attempt, int rank) {
    return temporary_dir ? fmt::format("{}/error-{}-{}.json", run_dir, attempt, rank)
                         : error_file(run_dir, attempt, rank);
  };
  hooks.error_file = [&](int attempt, int rank) {
    if (!temporary_dir) make_rank_dir(run_dir, attempt, rank);
    return error_path(attempt, rank);
  };
  hooks.error_message = [&](int attempt, int rank) {
    return read_error_file_message(error_path(attempt, rank));
  };
  int code;
  try {
    code = run_node(job, hooks, lifeline, lifeline_fd);
  } catch (const std::exception& e) {
    error(e.what());
    code = 1;
  }
  if (std::size_t dropped = console_dropped_lines(); dropped > 0) {
    console_write(STDERR_FILENO,
                  fmt::format("mlrun: {} lines of worker output were dropped: the terminal or pipe "
                              "took none for {} ms\n",
                              dropped, kConsoleStall.count()));
  }
  // The loop's signal handlers are gone (Asio restores the default actions): a late SIGUSR1
  // must still not end this process while it waits for its agents.
  keep_forwarded_signals_harmless(plan.signals);
  return code;
}

// The transport to the nodes that get an agent (none when every node is this host).
std::unique_ptr<transport::Transport> open_transport(const Options& o,
                                                     const std::vector<transport::AgentNode>& nodes,
                                                     std::chrono::milliseconds* grace) {
  std::vector<std::string> errors;
  std::unique_ptr<transport::Transport> t;
  if (o.launcher == "slurm") {
    transport::SlurmConfig config;
    t = transport::make_slurm_transport(errors, &config);
    // Each agent stops its workers before Slurm's own SIGKILL when Slurm stops the job.
    *grace = transport::grace_within_kill_wait(*grace, config.kill_wait);
  } else if (o.launcher == "sim") {
    t = transport::make_local_transport(nodes);
  } else if (!nodes.empty()) {
    // Past --tree_width hosts, only the head's children of the launch tree are connected here.
    t = transport::connect_ssh(nodes, o.tree_width, std::chrono::seconds(10), errors);
    if (int depth = transport::tree_depth(transport::plan_tree(nodes, o.tree_width)); depth > 1) {
      log::info("launch tree: {} nodes, {} wide, {} levels", nodes.size(), o.tree_width, depth);
    }
  }
  for (const auto& e : errors) error(e);
  return t;
}

// The agents' job: the same for every node but its rank and worker count.
transport::AgentJob agent_job(const Options& o, const LaunchPlan& plan, const std::string& endpoint,
                              int port, const std::string& token, std::chrono::milliseconds grace) {
  transport::AgentJob job;
  job.endpoint = endpoint;
  job.port = port;
  job.token = token;
  job.job_id = plan.job_id;
  job.nnodes = static_cast<int>(plan.hosts.nodes.size());
  job.grace = grace;
  const RdzvConf& conf = plan.rdzv;
  job.heartbeat_interval = conf.heartbeat_interval;
  job.heartbeat_timeout = conf.heartbeat_timeout;
  job.log_level = spdlog::level::to_string_view(log::logger().level()).data();
  std::error_code ec;
  job.cwd = fs::current_path(ec).string();
  // MLRUN_CGROUP: the head's opt-out from job cgroups holds on every node (docs/launcher.md).
  for (const char* name : {"PATH", "LD_LIBRARY_PATH", "PYTHON", "MLRUN_CGROUP"}) {
    if (const char* v = std::getenv(name)) job.env.emplace_back(name, v);
  }
  job.args = o.node_args;
  for (const auto& [name, value] : plan.exports) {
    job.args.push_back("-x");
    job.args.push_back(name + "=" + value);
  }
  job.args.push_back("--");
  job.args.push_back(o.program);
  job.args.insert(job.args.end(), o.program_args.begin(), o.program_args.end());
  return job;
}

// The nodes that get an agent through the transport: every node but this host's.
std::vector<transport::AgentNode> agent_nodes_of(const LaunchPlan& plan) {
  const auto& nodes = plan.hosts.nodes;
  std::vector<transport::AgentNode> agent_nodes;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].local) continue;
    const auto& h = nodes[i].host;
    agent_nodes.push_back(
        {static_cast<int>(i), h.host, h.user, h.port, nodes[i].nproc, nodes[i].host.slot_ids});
  }
  return agent_nodes;
}

// The job on every node of --hostfile / -H or of the Slurm allocation, from here: the
// rendezvous is served here, this host's workers (if it is listed, over SSH) run in this process,
// every other node gets an agent through the transport (SSH, or one srun step).
int launch_on_hosts(const Options& o, LaunchPlan& plan, Lifeline& lifeline) {
  const auto& nodes = plan.hosts.nodes;
  const auto began = std::chrono::steady_clock::now();
  log::info("job {}: {} nodes, world size {}, backend {}", plan.job_id, nodes.size(),
            plan.world_size, plan.backend);
  // 1. The transport to every node that gets an agent, made before anything starts: every
  //    unreachable host is reported together and nothing runs.
  std::vector<transport::AgentNode> agent_nodes = agent_nodes_of(plan);
  auto grace = std::chrono::milliseconds(static_cast<long>(o.grace_period * 1000));
  // Declared before the agents so that it is destroyed after them: the transport's end joins its
  // threads, whose loss reports abort the job on this server (finish() has closed them by then).
  std::optional<rendezvous::Server> server;
  auto agents = open_transport(o, agent_nodes, &grace);
  if (!agents && !agent_nodes.empty()) return 1;
  // A head that runs no workers takes SIGINT, SIGTERM and SIGHUP on a thread of its own, blocked
  // in every other: from here on, before the rendezvous server's and the transport's threads
  // start and inherit the block. (A thread that took one with its default action would end the
  // head at once: no abort, no wait for the nodes to stop their workers.)
  auto local = std::find_if(nodes.begin(), nodes.end(), [](const NodePlan& n) { return n.local; });
  std::optional<HeadSignals> head_signals;
  if (local == nodes.end()) head_signals.emplace(plan.signals);
  // 2. The rendezvous, on every address; the nodes reach it at this host's address on their
  //    route here (SSH: the one their connection came in on; Slurm: the one srun ran at).
  std::string advertised = agents ? agents->head_address() : "127.0.0.1";
  // This host's own workers talk to the others on the interface of that route.
  if (agents && !advertised.empty() && o.master_addr.empty()) choose_network(o, plan, advertised);
  std::string token = random_hex(16);
  try {
    // With --store mlrun this is also PyTorch's TCPStore, which has no authentication: listen
    // on the address the nodes reach (docs/torch-store.md), where it is known here.
    bool narrow = o.store == "mlrun" && !advertised.empty();
    rendezvous::ServerOptions so{narrow ? advertised : "0.0.0.0", 0, token, plan.job_id};
    so.torch_store = o.store == "mlrun";
    server.emplace(rendezvous::Server::start(std::move(so)));
  } catch (const std::exception& e) {
    error(fmt::format("cannot serve the rendezvous: {}", e.what()));
    return 1;
  }
  std::string endpoint = advertised.empty() ? "" : make_endpoint(advertised, server->port());
  log::info("rendezvous serving at {}",
            endpoint.empty() ? fmt::format("port {}", server->port()) : endpoint);
  // 3. An agent on every other node.
  rendezvous::Server* served = &*server;
  if (head_signals) {
    // A head in a batch script (a step on a node: SLURMD_NODENAME is set) gets Slurm's SIGTERM
    // with every task; one under salloc, on the submit host, gets it from a person or a script.
    std::string note = o.launcher == "slurm" && std::getenv("SLURMD_NODENAME") != nullptr
                           ? transport::slurm_signal_note(transport::read_slurm_env().job_id)
                           : "";
    head_signals->on_interrupt([served, note](const std::string& reason) {
      bool term = reason.find("SIGTERM") != std::string::npos;
      served->abort(term ? reason + note : reason);
    });
    // SIGUSR1/SIGUSR2 go to every node through the rendezvous (launcher/signal_relay.h), on a
    // connection made at the first one.
    head_signals->on_forward(
        [endpoint, token, job_id = plan.job_id, origin = make_signal_origin(),
         client = std::make_shared<std::optional<rendezvous::Client>>()](int sig) {
          try {
            if (!*client) {
              rendezvous::ClientOptions options;
              options.job_id = job_id;
              options.connect_timeout = std::chrono::seconds(10);
              client->emplace(rendezvous::Client::connect(endpoint, token, options));
            }
            publish_signal(**client, sig, origin);
          } catch (const std::exception& e) {
            fmt::print(stderr, "mlrun: cannot pass {} on to the nodes: {}\n", signal_name(sig),
                       e.what());
          }
        });
  }
  if (agents) {
    agents->start(agent_job(o, plan, endpoint, server->port(), token, grace), agent_nodes,
                  [served](int node, const std::string& host, const std::string& why) {
                    served->abort(lost_reason(node, host, why));
                  });
  }
  // 4. This host's workers, or, when it is not listed, a watch over the others'.
  int code;
  if (local != nodes.end()) {
    plan.nproc = local->nproc;
    NodeJob job;
    job.endpoint = endpoint;
    job.token = token;
    job.job_id = plan.job_id;
    job.nnodes = static_cast<int>(nodes.size());
    job.node_rank = static_cast<int>(local - nodes.begin());
    job.nproc = local->nproc;
    const RdzvConf& conf = plan.rdzv;
    job.heartbeat_interval = conf.heartbeat_interval;
    job.heartbeat_timeout = conf.heartbeat_timeout;
    job.publish_signals = true;
    job.watch_signals = true;
    code = run_this_node(o, plan, job, lifeline, -1);
  } else {
    code =
        watch_job(endpoint.empty() ? make_endpoint("127.0.0.1", server->port()) : endpoint, token,
                  plan.job_id, static_cast<int>(nodes.size()), o.max_restarts, *head_signals);
  }
  // 5. Every agent ends with the job, after stopping its workers (at most the grace period);
  //    the transport stops any that do not.
  log::info("job over with exit code {} after {:.2f} s", code, log::since(began));
  if (agents) agents->finish(grace + std::chrono::seconds(10));
  // The server is destroyed before the signals' thread ends: a late signal must not reach it.
  if (head_signals) {
    head_signals->on_interrupt(nullptr);
    head_signals->on_forward(nullptr);
  }
  return code;
}

void print_host_plan(const Options& o, const LaunchPlan& plan) {
  const bool slurm = o.launcher == "slurm";
  bool counted = true;  // Every node's worker count is known here (not its GPUs, under Slurm).
  for (const auto& n : plan.hosts.nodes) counted = counted && n.nproc > 0;
  fmt::print("mlrun: dry run: {} nodes, world size {}, backend {}\n", plan.hosts.nodes.size(),
             counted ? fmt::to_string(plan.world_size) : "from each node's GPUs", plan.backend);
  print_option_sources(o);
  fmt::print("transport: {} ({})\n", o.launcher, o.launcher_why);
  fmt::print("teardown: {} (on this host; each node's agent finds its own)\n",
             probe_cgroup_support().describe());
  // Over SSH past --tree_width hosts, who starts each node's agent.
  std::vector<std::string> parent(plan.hosts.nodes.size());
  if (o.launcher == "ssh") {
    auto agents = agent_nodes_of(plan);
    auto roots = transport::plan_tree(agents, o.tree_width);
    if (int depth = transport::tree_depth(roots); depth > 1) {
      fmt::print("launch tree: {} wide, {} levels of agents\n", o.tree_width, depth);
      std::function<void(const transport::TreeNode&)> walk = [&](const transport::TreeNode& t) {
        for (const auto& c : t.children) {
          parent[c.node.node_rank] = t.node.host;
          walk(c);
        }
      };
      for (const auto& r : roots) walk(r);
    }
  }
  int offset = 0;
  for (std::size_t i = 0; i < plan.hosts.nodes.size(); ++i) {
    const auto& n = plan.hosts.nodes[i];
    std::string how = slurm                 ? "agent through srun"
                      : o.launcher == "sim" ? "simulated: an agent on this machine"
                      : n.local             ? "this host, no SSH"
                      : !parent[i].empty()  ? "agent over SSH from " + parent[i]
                                            : "agent over SSH";
    std::string host = (n.host.user.empty() ? "" : n.host.user + "@") + n.host.host;
    if (!counted) {
      fmt::print("node {} ({}): {}, {}\n", i, host,
                 n.nproc > 0 ? fmt::format("{} workers", n.nproc) : "one worker per GPU (else 1)",
                 how);
      continue;
    }
    fmt::print("node {} ({}): ranks {}-{}, {}\n", i, host, offset, offset + n.nproc - 1, how);
    offset += n.nproc;
  }
  fmt::print("  command: {}\n", shell_words(plan.argv));
  fmt::print("  {}\n", store_line(o));
  for (const auto& [name, value] : plan.exports) {
    fmt::print("  -x {}\n",
               name == "MLRUN_RDZV_TOKEN" ? name + "=(secret)" : shell_word(name + "=" + value));
  }
}

// The launch of this node's part of a job, as named steps.
int launch(const Options& o, std::vector<std::string> option_errors) {
  // 1. Plan: program, worker count, backend, every user error reported before anything runs.
  LaunchPlan plan;
  if (!plan_launch(o, plan, std::move(option_errors))) return 2;
  // 2. A dry run prints the plan and starts nothing.
  if (o.dry_run) {
    on_hosts(o) ? print_host_plan(o, plan) : print_dry_run(o, plan);
    return 0;
  }
  // A closed stdin would let the next descriptor opened take fd 0 and become rank 0's stdin.
  if (fcntl(STDIN_FILENO, F_GETFD) < 0) open("/dev/null", O_RDONLY);
  // 3. The lifeline, forked while this process has one thread, cleans up if we are SIGKILLed.
  //    Before it, SIGUSR1/SIGUSR2 lose their default action (ending the process) in both.
  keep_forwarded_signals_harmless(plan.signals);
  Lifeline lifeline = Lifeline::start();
  // Ignore SIGPIPE: a closed terminal must not kill the launcher before it stops its workers.
  signal(SIGPIPE, SIG_IGN);
  if (o.backend == "mpi") return launch_mpi(o, plan, lifeline);
  if (on_hosts(o)) return launch_on_hosts(o, plan, lifeline);
  // 4. The rendezvous: this launcher serves it (one node; node 0 or the endpoint's owner of a
  //    multi-node job), or joins another node's.
  RendezvousPlan rdzv = plan_rendezvous(o, plan);
  std::optional<rendezvous::Server> server;
  if (rdzv.serve) {
    try {
      rendezvous::ServerOptions so{rdzv.listen_host, rdzv.port, rdzv.token, plan.job_id};
      so.torch_store = o.store == "mlrun";
      server.emplace(rendezvous::Server::start(std::move(so)));
    } catch (const rendezvous::ConnectionError& e) {
      // Joining by endpoint, several nodes may share the endpoint's host: the first to listen
      // serves, the others join it (as torchrun's c10d does).
      if (o.rdzv_endpoint.empty()) {
        error(fmt::format("cannot serve the rendezvous on {}:{}: {}", rdzv.listen_host, rdzv.port,
                          e.what()));
        return 1;
      }
    } catch (const std::exception& e) {
      error(fmt::format("cannot serve the rendezvous on {}:{}: {}", rdzv.listen_host, rdzv.port,
                        e.what()));
      return 1;
    }
    if (server && rdzv.endpoint.empty()) rdzv.endpoint = server->endpoint();
    if (server && o.nnodes_max > 1) {
      fmt::print(stderr, "mlrun: serving the rendezvous on {}:{}{}\n", rdzv.listen_host,
                 server->port(),
                 rdzv.listen_host == "0.0.0.0" ? " (every interface: the endpoint's host is "
                                                 "not one of this host's addresses)"
                                               : "");
    }
  }
  // 5. Run this node's workers for every attempt: join, spawn, route output, stop everyone on
  //    the first failure anywhere, restart while restarts remain.
  NodeJob job;
  job.endpoint = rdzv.endpoint;
  job.token = rdzv.token;
  job.job_id = plan.job_id;
  job.nnodes = o.nnodes_max;
  job.node_rank = o.nnodes_max == 1 || o.rdzv_endpoint.empty() ? o.node_rank : -1;
  job.nproc = plan.nproc;
  // One node: loopback unless told. Several: the user's --master_addr, else node 0's own
  // address on its route to the rendezvous (whichever node that turns out to be).
  job.master_addr = o.nnodes_max == 1 ? plan.master_addr : o.master_addr;
  job.master_port = o.nnodes_max == 1 ? o.master_port : 0;
  const RdzvConf& conf = plan.rdzv;
  job.join_timeout = conf.join_timeout;
  job.nnodes_min = o.nnodes_min;
  job.last_call = conf.last_call;
  job.heartbeat_interval = conf.heartbeat_interval;
  job.heartbeat_timeout = conf.heartbeat_timeout;
  job.serves_rendezvous = server.has_value();
  return run_this_node(o, plan, job, lifeline, -1);
}

// An SSH agent's job: one JSON line on stdin, read byte by byte, since nothing past it may be
// consumed: stdin stays open as the head's lifeline.
std::string read_job_line() {
  std::string line;
  char c;
  while (line.size() < (1u << 20)) {
    ssize_t n = read(STDIN_FILENO, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || c == '\n') break;
    line += c;
  }
  return line;
}

// A Slurm agent's place in the job: its node among the job's nodes (by the name slurmd runs as),
// and the head's rendezvous at the address srun ran at.
void place_slurm_agent(const nlohmann::json& j, NodeJob& job, std::vector<int>& gpu_ids) {
  const char* name = std::getenv("SLURMD_NODENAME");
  const char* head = std::getenv("SLURM_LAUNCH_NODE_IPADDR");
  if (name == nullptr || head == nullptr) {
    throw std::runtime_error(
        "SLURMD_NODENAME or SLURM_LAUNCH_NODE_IPADDR is not set: not a task "
        "of an srun step");
  }
  const auto& nodes = j.at("nodes");
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].at("host").get<std::string>() == name) {
      job.node_rank = static_cast<int>(i);
      job.nproc = nodes[i].at("nproc").get<int>();
      gpu_ids = nodes[i].value("gpus", std::vector<int>());
    }
  }
  if (job.node_rank < 0) throw std::runtime_error(fmt::format("{} is not a node of the job", name));
  job.endpoint = make_endpoint(head, j.at("port").get<int>());
  const char* token = std::getenv("MLRUN_RDZV_TOKEN");
  job.token = token != nullptr ? token : "";
}

// `mlrun agent`: one node of a job started by a head. Over SSH its job arrives on stdin (one JSON
// line: rendezvous endpoint and token, node rank, worker count, the head's options, environment
// and directory), and stdin stays open: its end means the head is gone. Through srun
// (transport/slurm.h) the job is in MLRUN_AGENT_JOB and the token in MLRUN_RDZV_TOKEN; the head's
// end reaches the agent as the end of the step, or of its rendezvous connection.
int agent_command(const std::vector<std::string>&) {
  const char* from_env = std::getenv("MLRUN_AGENT_JOB");
  const bool slurm = from_env != nullptr;
  std::string line = slurm ? std::string(from_env) : read_job_line();
  // The workers inherit this environment: the job's description is not theirs.
  unsetenv("MLRUN_AGENT_JOB");
  nlohmann::json j;
  std::vector<std::string> args;
  NodeJob job;
  std::vector<int> gpu_ids;  // The GPUs the head gave this node (--include host:2,3).
  long grace_ms = 0;
  try {
    j = nlohmann::json::parse(line);
    if (slurm) {
      place_slurm_agent(j, job, gpu_ids);
    } else {
      job.endpoint = j.at("endpoint").get<std::string>();
      job.token = j.at("token").get<std::string>();
      job.node_rank = j.at("node_rank").get<int>();
      job.nproc = j.at("nproc").get<int>();
      job.tree_parent = j.value("parent", std::string());
      gpu_ids = j.value("gpus", std::vector<int>());
    }
    job.job_id = j.at("job_id").get<std::string>();
    job.nnodes = j.at("nnodes").get<int>();
    grace_ms = j.value("grace_ms", 0L);
    // A head that predates them sends no heartbeat settings: the defaults.
    if (long ms = j.value("heartbeat_interval_ms", 0L); ms > 0) {
      job.heartbeat_interval = std::chrono::milliseconds(ms);
    }
    if (long ms = j.value("heartbeat_timeout_ms", 0L); ms > 0) {
      job.heartbeat_timeout = std::chrono::milliseconds(ms);
    }
    args = j.at("args").get<std::vector<std::string>>();
    for (const auto& [name, value] : j.at("env").items()) {
      setenv(name.c_str(), value.get<std::string>().c_str(), 1);
    }
    // The head's level, whichever way it was chosen; the agent's lines reach the head's stderr
    // through its relay, tagged with this host's name.
    if (auto level = log::parse_level(j.value("log_level", std::string("warning")))) {
      log::init(*level, host_name());
    }
    std::string cwd = j.at("cwd").get<std::string>();
    if (chdir(cwd.c_str()) != 0) {
      fmt::print(stderr, "mlrun: warning: {}: cannot enter {} ({}); running in {}\n", host_name(),
                 cwd, std::strerror(errno), getenv("HOME") ? getenv("HOME") : "/");
    }
  } catch (const std::exception& e) {
    error(fmt::format("agent on {}: bad job description{}: {}", host_name(),
                      slurm ? " in MLRUN_AGENT_JOB" : " on stdin", e.what()));
    return 2;
  }
  // A node without a given worker count runs one worker per GPU it sees (inside a Slurm step:
  // the job's GPUs on this node), else one.
  if (job.nproc == 0) job.nproc = std::max(1, count_gpus());
  log::info("agent up: node {} of {}, {} worker{}, rendezvous at {}", job.node_rank, job.nnodes,
            job.nproc, job.nproc == 1 ? "" : "s", job.endpoint);
  args.insert(args.begin(), fmt::format("--nproc_per_node={}", job.nproc));
  ParseResult parsed = parse_options(args);
  if (grace_ms > 0) parsed.options.grace_period = static_cast<double>(grace_ms) / 1000;
  std::string rdzv_host;
  int rdzv_port;
  split_endpoint(job.endpoint, rdzv_host, rdzv_port);
  // The interface that reaches the head's rendezvous is the one the job's traffic takes.
  parsed.options.master_addr = rdzv_host;
  std::vector<std::string> errors;
  for (auto& e : parsed.errors) errors.push_back(fmt::format("{}: {}", host_name(), e.message));
  LaunchPlan plan;
  plan.gpu_ids = gpu_ids;
  if (!plan_launch(parsed.options, plan, errors)) return 2;
  plan.job_id = job.job_id;
  if (slurm) {
    // In a step Slurm signals every process, the workers too: its USR1 is theirs already, and
    // its SIGTERM is a scancel, the time limit or a preemption, which the summary says.
    plan.signals.forward_own = false;
    job.signal_note = transport::slurm_signal_note(transport::read_slurm_env().job_id);
  }
  keep_forwarded_signals_harmless(plan.signals);
  // Over SSH, a hung agent (SIGSTOP, D state) never reads its stdin's end: its lifeline sees
  // it, and SIGKILLs the agent when it has not stopped its workers by itself within the grace
  // period and 10 s, as it would when awake.
  auto awake_bound =
      std::chrono::milliseconds(static_cast<long>(parsed.options.grace_period * 1000)) +
      std::chrono::seconds(10);
  Lifeline lifeline = slurm ? Lifeline::start() : Lifeline::start(STDIN_FILENO, awake_bound);
  signal(SIGPIPE, SIG_IGN);
  job.print_summary = false;
  // The head's forwarded signals come through the rendezvous. One this agent gets itself goes to
  // its own workers only (over SSH; in a Slurm step Slurm has signalled them already).
  job.watch_signals = true;
  // An interior agent of the launch tree starts its children first (after the lifeline's fork,
  // which must not hold their connections: this agent's end closes them, their lifeline).
  std::unique_ptr<transport::SshSubtree> children;
  if (!slurm) children = start_children(j);
  int code = run_this_node(parsed.options, plan, job, lifeline, slurm ? -1 : STDIN_FILENO);
  // Each child ends with the job, after stopping its workers (and its own children).
  if (children) {
    children->finish(
        std::chrono::milliseconds(static_cast<long>(parsed.options.grace_period * 1000)) +
        std::chrono::seconds(10));
  }
  // Through srun, an agent's non-zero exit makes Slurm kill every other agent at once
  // (--kill-on-bad-exit), before they have stopped their workers: the job's result travels
  // through the rendezvous, and a non-zero exit is left to an agent that could not take part.
  return slurm ? 0 : code;
}

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
    {"doctor", doctor_command},
    {"agent", agent_command},
#ifdef MLRUN_HAVE_RDZV_COMMAND
    {"rdzv", rdzv_command},
#endif
};

}  // namespace

int mlrun_main(const std::vector<std::string>& args) {
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
