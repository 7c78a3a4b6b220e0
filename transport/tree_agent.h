// An interior agent of the launch tree (transport/tree.h, docs/multinode.md "The launch tree"):
// before its own workers, an agent whose job description lists children starts their agents over
// SSH (on this machine for a simulated job), relays their output up its own stdout and stderr, and
// reports a child that is unreachable or lost by aborting the job on the head's rendezvous, naming
// the node, its host and the agents that went with it.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "transport/ssh.h"

namespace mlrun {

/// Starts the children that job lists (AgentJob::children); nullptr when it lists none. Never
/// throws for a remote failure: an unreachable child aborts the job (nothing of the subtree is
/// started) and nullptr is returned.
std::unique_ptr<transport::Subtree> start_children(const transport::AgentJob& job);

/// The reason a lost agent's job is aborted with, at the head and in the tree alike.
std::string lost_reason(int node_rank, const std::string& host, const std::string& why);

}  // namespace mlrun
