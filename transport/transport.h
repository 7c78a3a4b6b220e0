// How the head reaches the nodes of a job it starts from one command (docs/design.md §2):
// the head starts one agent per node through a transport and watches them; everything else
// (the rendezvous, the rank layout, the teardown) goes through the rendezvous server and is the
// same for every transport. Two implement it: SSH (one connection per host, transport/ssh.h)
// and Slurm (one srun step over the allocation's nodes, transport/slurm.h).
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace mlrun::transport {

/// One node that gets an agent.
struct AgentNode {
  int node_rank = 0;
  std::string host;  ///< The name the transport reaches it by (SSH target, Slurm node name).
  std::string user;  ///< SSH only: user@ of the hostfile; empty: SSH's default.
  int port = 0;      ///< SSH only: port= of the hostfile; 0: SSH's default.
  int nproc = 0;     ///< Workers to start; 0: as many as the node has GPUs, else 1.
  /// GPU indices for its workers (--include host:2,3, --num_gpus), local rank order; empty:
  /// whatever the node's CUDA_VISIBLE_DEVICES says.
  std::vector<int> gpus;
};

/// The job every agent is handed. The token never goes into any process's argv: each transport
/// hands it over on the agent's stdin (SSH) or in its environment (Slurm).
struct AgentJob {
  std::string endpoint;  ///< The head's rendezvous, "host:port"; see Transport::head_address.
  int port = 0;          ///< Its port.
  std::string token;
  std::string job_id;
  int nnodes = 0;
  std::string cwd;
  /// PATH, LD_LIBRARY_PATH and PYTHON as the head has them.
  std::vector<std::pair<std::string, std::string>> env;
  /// The agent's mlrun options, "--", the program and its arguments.
  std::vector<std::string> args;
  /// Each agent's grace period between SIGTERM and SIGKILL of its workers; 0: its own option.
  std::chrono::milliseconds grace{0};
  /// Each node's heartbeats (docs/multinode.md, "Lifelines"): how often, and the silence after
  /// which the server aborts the job naming the node. 0: the agent's defaults.
  std::chrono::milliseconds heartbeat_interval{0};
  std::chrono::milliseconds heartbeat_timeout{0};
  /// The head's log level ("info"), for the agents' own log lines (worker/log.h).
  std::string log_level = "warning";
};

/// The JSON description an agent reads (`mlrun agent`): job without the token; node_rank and
/// nproc of one node, or, with node < 0, the list of every node's name and worker count (the
/// agent finds its own).
nlohmann::json agent_description(const AgentJob& job, const std::vector<AgentNode>& nodes,
                                 int node);

/// An agent that ended before the job was over: its node (-1 when no single node is known), the
/// node's host, and why.
using LostCallback =
    std::function<void(int node_rank, const std::string& host, const std::string& why)>;

class Transport {
 public:
  virtual ~Transport() = default;
  /// What names this transport in --dry-run and messages: "ssh", "slurm".
  virtual std::string name() const = 0;
  /// This host's address as the nodes reach it, for the rendezvous endpoint; empty when each
  /// agent learns it by itself (Slurm: SLURM_LAUNCH_NODE_IPADDR, the address srun ran at).
  virtual std::string head_address() const = 0;
  /// Starts an agent on every node. Their output reaches this process's stdout and stderr in
  /// whole lines (each already tagged with its rank). An agent that ends before finish() is
  /// reported to on_lost, from a thread of the transport.
  virtual void start(const AgentJob& job, const std::vector<AgentNode>& nodes,
                     LostCallback on_lost) = 0;
  /// The job is over: agents that end from now on are not lost. Waits up to bound for every
  /// agent to end by itself (each stops its workers first), then stops the rest.
  virtual void finish(std::chrono::milliseconds bound) = 0;
};

}  // namespace mlrun::transport
