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

#include "transport/agent_job.h"

namespace mlrun::transport {

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
