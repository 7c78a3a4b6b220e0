#include "launcher/launch_hosts.h"

#include <utility>  // Boost 1.74's Asio headers use std::exchange without including it.

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>

#include <fmt/format.h>

#include <mlrun/rendezvous.hpp>

#include "launcher/head_signals.h"
#include "launcher/join_progress.h"
#include "launcher/signal_relay.h"
#include "launcher/this_node.h"
#include "rendezvous/server.h"
#include "transport/local.h"
#include "transport/slurm.h"
#include "transport/slurm_env.h"
#include "transport/ssh.h"
#include "transport/tree_agent.h"
#include "worker/cgroup.h"
#include "worker/log.h"
#include "worker/net.h"
#include "worker/numa.h"
#include "worker/signals.h"

namespace mlrun {
namespace {

namespace fs = std::filesystem;

// The transport to the nodes that get an agent (none when every node is this host).
std::unique_ptr<transport::Transport> open_transport(const Options& o,
                                                     const std::vector<transport::AgentNode>& nodes,
                                                     std::chrono::milliseconds* grace) {
  std::vector<std::string> errors;
  std::unique_ptr<transport::Transport> t;
  if (o.launcher == "slurm") {
    // Each agent stops its workers before Slurm's own SIGKILL when Slurm stops the job: the
    // transport cuts their grace to KillWait once Slurm has said it (after srun's start).
    t = transport::make_slurm_transport(errors);
  } else if (o.launcher == "sim") {
    // Past --tree_width nodes, the tree SSH would build, all of it on this machine.
    t = transport::make_local_transport(nodes, o.tree_width);
  } else if (!nodes.empty()) {
    // Past --tree_width hosts, only the head's children of the launch tree are connected here.
    t = transport::connect_ssh(nodes, o.tree_width, std::chrono::seconds(10), errors);
  }
  if (o.launcher != "slurm") {
    if (int depth = transport::tree_depth(transport::plan_tree(nodes, o.tree_width)); depth > 1) {
      log::info("launch tree: {} nodes, {} wide, {} levels", nodes.size(), o.tree_width, depth);
    }
  }
  for (const auto& e : errors) error(e);
  return t;
}

// The descriptors this process holds at once for the job, a little more than measured
// (docs/scale.md, "Descriptors"): the rendezvous server's four connections per node (control,
// coordinator, heartbeats, signal watch); the transport's, per agent it starts itself: a
// simulated agent's three pipes and pidfd, an SSH child's socket and four pipes (past
// --tree_width, only the head's children of the tree, for either); and what it holds already and
// holds anyway (descriptors_besides).
std::size_t descriptors_needed(const Options& o, const LaunchPlan& plan,
                               const std::vector<transport::AgentNode>& agent_nodes) {
  std::size_t need = descriptors_besides() + 4 * plan.hosts.nodes.size();
  if (o.launcher == "sim") {
    need += 4 * transport::plan_tree(agent_nodes, o.tree_width).size();
  } else if (o.launcher != "slurm" && !agent_nodes.empty()) {
    need += 9 * transport::plan_tree(agent_nodes, o.tree_width).size();
  }
  return need;
}

// descriptor_limit_allows, and with PyTorch's store served here a warning: each rank that uses
// it holds one more connection, and whether a rank does is the program's business.
bool enough_descriptors(const Options& o, const LaunchPlan& plan, std::size_t need) {
  std::size_t nodes = plan.hosts.nodes.size();
  if (!descriptor_limit_allows(need, nodes, "the transport's")) return false;
  std::size_t ranks = 0;
  for (const auto& n : plan.hosts.nodes) ranks += static_cast<std::size_t>(std::max(n.nproc, 1));
  if (std::size_t limit = rendezvous::raise_open_file_limit();
      o.store == "mlrun" && limit < need + ranks) {
    fmt::print(stderr,
               "mlrun: warning: {} ranks that use PyTorch's store, served here (--store mlrun), "
               "need about {} open descriptors in this process, but its limit is {} (`ulimit "
               "-Hn`): connections past it are refused\n",
               ranks, need + ranks, limit);
  }
  return true;
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
  job.log_level = std::string(log::level_name(log::level()));
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

// For a simulation, on the job's abort: its nodes share this machine's CPUs, where an agent
// that gets none for heartbeat_timeout is taken for a hung node, so such a loss says that too
// (docs/scale.md).
std::function<void(std::string_view)> sim_abort_note(const LaunchPlan& plan) {
  std::size_t cpus = std::max<std::size_t>(1, current_cpu_affinity().size());
  std::string note = fmt::format(
      "mlrun: note: the {} simulated nodes{} share this machine's {} CPU{}: an agent that gets "
      "none for heartbeat_timeout is taken for a hung node (`--rdzv_conf heartbeat_timeout=S` "
      "gives more time)\n",
      plan.hosts.nodes.size(),
      plan.world_size > 0 ? fmt::format(" and their {} workers", plan.world_size) : "", cpus,
      cpus == 1 ? "" : "s");
  return [note](std::string_view reason) {
    if (reason.find("lost: no heartbeat") != std::string_view::npos) fmt::print(stderr, "{}", note);
  };
}

// The rendezvous of a job started from here, on every address (or, for PyTorch's store, on the
// one the nodes reach: advertised). Returns false, said, when it cannot be served.
bool serve_head_rendezvous(const Options& o, const LaunchPlan& plan, const std::string& advertised,
                           const std::string& token, std::chrono::steady_clock::time_point began,
                           std::optional<rendezvous::Server>& server) {
  try {
    // With --store mlrun this is also PyTorch's TCPStore, which has no authentication: listen
    // on the address the nodes reach (docs/torch-store.md), where it is known here.
    bool narrow = o.store == "mlrun" && !advertised.empty();
    rendezvous::ServerOptions so{narrow ? advertised : "0.0.0.0", 0, token, plan.job_id};
    so.torch_store = o.store == "mlrun";
    // The nodes, this one among them, say an abort's reason as they learn of it; who sent it is
    // for -vv.
    so.log_client_aborts = log::enabled(log::Level::debug);
    // The running count of joined ranks, on the server's thread (launcher/join_progress.h).
    if (log::enabled(log::Level::info)) {
      so.on_join = [progress = std::make_shared<JoinProgress>(plan.world_size, began)](
                       std::string_view group, std::uint32_t joined, std::uint32_t size,
                       std::uint64_t ranks) {
        if (auto line = progress->on_join(group, joined, size, ranks)) log::info("{}", *line);
      };
    }
    if (o.launcher == "sim") so.on_abort = sim_abort_note(plan);
    server.emplace(rendezvous::Server::start(std::move(so)));
    return true;
  } catch (const std::exception& e) {
    error(fmt::format("cannot serve the rendezvous: {}", e.what()));
    return false;
  }
}

// A head without a loop of its own (it runs no workers, or its node's loop has not started): its
// stop signals abort the job on its server, and SIGUSR1/SIGUSR2 go to every node through the
// rendezvous (launcher/signal_relay.h), on a connection made at the first one.
void arm_head_signals(HeadSignals& head_signals, const Options& o, const LaunchPlan& plan,
                      rendezvous::Server* served, const std::string& endpoint,
                      const std::string& token) {
  // A head in a batch script (a step on a node: SLURMD_NODENAME is set) gets Slurm's SIGTERM
  // with every task; one under salloc, on the submit host, gets it from a person or a script.
  std::string note = o.launcher == "slurm" && std::getenv("SLURMD_NODENAME") != nullptr
                         ? transport::slurm_signal_note(transport::read_slurm_env().job_id)
                         : "";
  head_signals.on_interrupt([served, note](const std::string& reason) {
    bool term = reason.find("SIGTERM") != std::string::npos;
    served->abort(term ? reason + note : reason);
  });
  head_signals.on_forward([endpoint, token, job_id = plan.job_id, origin = make_signal_origin(),
                           client =
                               std::make_shared<std::optional<rendezvous::Client>>()](int sig) {
    try {
      if (!*client) {
        rendezvous::ClientOptions options;
        options.job_id = job_id;
        options.connect_timeout = std::chrono::seconds(10);
        client->emplace(rendezvous::Client::connect(endpoint, token, options));
      }
      publish_signal(**client, sig, origin);
    } catch (const std::exception& e) {
      fmt::print(stderr, "mlrun: cannot pass {} on to the nodes: {}\n", signal_name(sig), e.what());
    }
  });
}

// This host's workers as node node_rank of the job, which the head serves at endpoint.
int run_head_node(const Options& o, LaunchPlan& plan, int node_rank, const std::string& endpoint,
                  const std::string& token, rendezvous::Server* served, Lifeline& lifeline) {
  const NodePlan& local = plan.hosts.nodes[node_rank];
  plan.nproc = local.nproc;
  NodeJob job;
  job.endpoint = endpoint;
  job.token = token;
  job.job_id = plan.job_id;
  job.nnodes = static_cast<int>(plan.hosts.nodes.size());
  job.node_rank = node_rank;
  job.nproc = local.nproc;
  const RdzvConf& conf = plan.rdzv;
  job.heartbeat_interval = conf.heartbeat_interval;
  job.heartbeat_timeout = conf.heartbeat_timeout;
  job.publish_signals = true;
  job.watch_signals = true;
  job.report_join_wait = false;  // The head's server says whom the join waits for.
  // The others would wait for this node's join until its timeout: tell them it is not coming.
  auto gave_up = [served, node_rank, host = plan.hostname](const std::string& why) {
    served->abort(fmt::format("node {} ({}) cannot start: {}", node_rank, host, why));
  };
  return run_this_node(o, plan, job, lifeline, -1, gave_up);
}

}  // namespace

// The job on every node of --hostfile / -H or of the Slurm allocation, from here: the
// rendezvous is served here, this host's workers (if it is listed, over SSH) run in this process,
// every other node gets an agent through the transport (SSH, or one srun step).
int launch_on_hosts(const Options& o, LaunchPlan& plan, Lifeline& lifeline) {
  return launch_on_hosts(o, plan, lifeline, open_transport);
}

int launch_on_hosts(const Options& o, LaunchPlan& plan, Lifeline& lifeline,
                    const OpenTransport& open_transport) {
  const auto& nodes = plan.hosts.nodes;
  const auto began = std::chrono::steady_clock::now();
  log::info("job {}: {} node{}, world size {}, backend {}", plan.job_id, nodes.size(),
            nodes.size() == 1 ? "" : "s",
            plan.world_size > 0 ? fmt::to_string(plan.world_size) : "from each node's GPUs",
            plan.backend);
  // 1. The transport to every node that gets an agent, made before anything starts: every
  //    unreachable host is reported together and nothing runs; so is a descriptor limit too low
  //    for the job.
  std::vector<transport::AgentNode> agent_nodes = agent_nodes_of(plan);
  if (!enough_descriptors(o, plan, descriptors_needed(o, plan, agent_nodes))) return 2;
  auto grace = std::chrono::milliseconds(static_cast<long>(o.grace_period * 1000));
  // Declared before the agents so that it is destroyed after them: the transport's end joins its
  // threads, whose loss reports abort the job on this server (finish() has closed them by then).
  std::optional<rendezvous::Server> server;
  auto agents = open_transport(o, agent_nodes, &grace);
  if (!agents && !agent_nodes.empty()) return 1;
  // The head takes SIGINT, SIGTERM and SIGHUP on a thread of its own, blocked in every other:
  // from here on, before the rendezvous server's and the transport's threads start and inherit
  // the block. (Until now a Ctrl-C ends the head at once, with nothing started on any node.
  // From here a thread that took one with its default action would end the head with agents
  // running: no abort, no wait for the nodes to stop their workers.) A head that runs workers of
  // its own hands the signals to its node's loop when that starts (step 4).
  auto local = std::find_if(nodes.begin(), nodes.end(), [](const NodePlan& n) { return n.local; });
  HeadSignals head_signals(plan.signals);
  // 2. The rendezvous, on every address; the nodes reach it at this host's address on their
  //    route here (SSH: the one their connection came in on; Slurm: the one srun ran at).
  std::string advertised = agents ? agents->head_address() : "127.0.0.1";
  // This host's own workers talk to the others on the interface of that route.
  if (agents && !advertised.empty() && o.master_addr.empty()) choose_network(o, plan, advertised);
  std::string token = random_hex(16);
  if (!serve_head_rendezvous(o, plan, advertised, token, began, server)) return 1;
  std::string endpoint = advertised.empty() ? "" : make_endpoint(advertised, server->port());
  log::info("rendezvous serving at {}",
            endpoint.empty() ? fmt::format("port {}", server->port()) : endpoint);
  // 3. An agent on every other node.
  rendezvous::Server* served = &*server;
  arm_head_signals(head_signals, o, plan, served, endpoint, token);
  if (agents) {
    agents->start(agent_job(o, plan, endpoint, server->port(), token, grace), agent_nodes,
                  [served](int node, const std::string& host, const std::string& why) {
                    served->abort(lost_reason(node, host, why));
                  });
  }
  // 4. This host's workers, or, when it is not listed, a watch over the others'.
  int code;
  if (local != nodes.end()) {
    // The node's loop takes the signals from here (worker/agent.cc unblocks them once its
    // handlers are in place; one that comes in between waits, pending, for that). One that came
    // before has aborted the job on the server: the node finds that at its join, starts no
    // worker and says so; the head exits 128 + the signal, as it does when it runs none.
    head_signals.stop_watching();
    int early = head_signals.signal();
    code = run_head_node(o, plan, static_cast<int>(local - nodes.begin()), endpoint, token, served,
                         lifeline);
    if (early != 0) code = 128 + early;
  } else {
    code =
        watch_job(endpoint.empty() ? make_endpoint("127.0.0.1", server->port()) : endpoint, token,
                  plan.job_id, static_cast<int>(nodes.size()), o.max_restarts, head_signals);
  }
  // 5. Every agent ends with the job, after stopping its workers (at most the grace period);
  //    the transport stops any that do not.
  log::info("job over with exit code {} after {:.2f} s", code, log::since(began));
  if (agents) agents->finish(grace + std::chrono::seconds(10));
  // The server is destroyed before the signals' thread ends: a late signal must not reach it.
  head_signals.on_interrupt(nullptr);
  head_signals.on_forward(nullptr);
  return code;
}

std::size_t descriptors_besides() {
  std::size_t open = 0;
  std::error_code ec;
  for (fs::directory_iterator it("/proc/self/fd", ec), end; !ec && it != end; it.increment(ec)) {
    ++open;
  }
  return (ec ? 3 : open) + 32;
}

bool descriptor_limit_allows(std::size_t need, std::size_t nodes, std::string_view besides) {
  std::size_t limit = rendezvous::raise_open_file_limit();
  if (limit >= need) return true;
  error(fmt::format("{} nodes need about {} open descriptors in this process (4 rendezvous "
                    "connections per node, and {}), but its limit is {} (`ulimit -Hn`, nofile in "
                    "/etc/security/limits.conf or LimitNOFILE= in a systemd unit): raise it to {} "
                    "or more, or use fewer nodes",
                    nodes, need, besides, limit, need));
  return false;
}

void print_host_plan(const Options& o, const LaunchPlan& plan) {
  const bool slurm = o.launcher == "slurm";
  bool counted = true;  // Every node's worker count is known here (not its GPUs, under Slurm).
  for (const auto& n : plan.hosts.nodes) counted = counted && n.nproc > 0;
  const size_t n = plan.hosts.nodes.size();
  fmt::print("mlrun: dry run: {} node{}, world size {}, backend {}\n", n, n == 1 ? "" : "s",
             counted ? fmt::to_string(plan.world_size) : "from each node's GPUs", plan.backend);
  print_option_sources(o);
  fmt::print("transport: {} ({})\n", o.launcher, o.launcher_why);
  fmt::print("teardown: {} (on this host; each node's agent finds its own)\n",
             probe_cgroup_support().describe());
  // Over SSH (or simulated) past --tree_width hosts, who starts each node's agent.
  std::vector<std::string> parent(plan.hosts.nodes.size());
  if (o.launcher == "ssh" || o.launcher == "sim") {
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
    std::string how = slurm ? "agent through srun"
                      : o.launcher == "sim" && !parent[i].empty()
                          ? "simulated: an agent on this machine, started by " + parent[i]
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

}  // namespace mlrun
