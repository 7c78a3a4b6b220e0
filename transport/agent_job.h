// The job a head hands each node's agent (`mlrun agent`, docs/multinode.md "Starting every host
// from one command"): one typed record, one encoder and one decoder. The head writes it
// (transport/ssh.h, transport/local.h, transport/slurm.h, and an interior agent of the launch tree
// for its children); the agent reads it (launcher/agent_command.cc, transport/tree_agent.h). On the
// wire it is one JSON object on one line: on the agent's stdin (SSH, sim) or in MLRUN_AGENT_JOB
// (Slurm).
#pragma once

#include <chrono>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

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

/// One node of the launch tree (transport/tree.h) and the nodes its agent starts.
struct TreeNode {
  AgentNode node;
  std::vector<TreeNode> children;
};

/// The job every agent is handed. The token never goes into any process's argv: each transport
/// hands it over on the agent's stdin (SSH, sim) or in its environment (Slurm, where the record
/// goes without it).
struct AgentJob {
  // The job's, the same on every node.
  std::string endpoint;  ///< The head's rendezvous, "host:port"; see Transport::head_address.
  int port = 0;          ///< Its port.
  std::string token;     ///< Empty: not in the record (Slurm: MLRUN_RDZV_TOKEN).
  std::string job_id;
  int nnodes = 0;
  std::string cwd;
  /// PATH, LD_LIBRARY_PATH, PYTHON and MLRUN_CGROUP as the head has them.
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

  // This node's place: given by whoever starts the agent (SSH, sim) ...
  int node_rank = -1;  ///< -1: the agent finds its own among nodes.
  int nproc = 0;       ///< As AgentNode::nproc.
  std::vector<int> gpus;
  std::string parent;              ///< The agent's parent in the launch tree; empty: the head.
  std::vector<TreeNode> children;  ///< The agents this one starts (the launch tree).
  /// --launcher sim: the children are simulated nodes, started as processes on this machine
  /// (transport/local.h) rather than over SSH.
  bool simulated = false;
  // ... or, with node_rank -1, every node's name and worker count, the agent's own among them
  // (Slurm: one srun step starts every agent with the same record).
  std::vector<AgentNode> nodes;
};

/// A record that is not an agent's job: what names the field and what is wrong with it.
class AgentJobError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// job as node's agent is handed it: the job's fields, node's place in it (its subtree of
/// the launch tree too), no list of every node.
AgentJob job_for_node(const AgentJob& job, const TreeNode& node, const std::string& parent);

/// The one-line JSON text of job (no newline), the token only when it is not empty.
std::string encode_agent_job(const AgentJob& job);

/// The record encode_agent_job wrote. Throws AgentJobError naming the field ("field nnodes:
/// missing", "field nodes[1].nproc: not an integer") or saying the text is not JSON. A field
/// that older heads did not send (grace, heartbeats, log level, gpus, parent, children, simulated)
/// may be missing; with node_rank, token is required; without, nodes is.
AgentJob decode_agent_job(std::string_view text);

}  // namespace mlrun::transport
