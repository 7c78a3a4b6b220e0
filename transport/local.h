// The simulation transport (--launcher sim, docs/scale.md): every node of --hostfile / -H gets a
// real `mlrun agent` started as a process on this machine instead of over SSH. Each agent goes by
// its node's host name (MLRUN_NODE_NAME), joins the head's real rendezvous server over TCP with
// real heartbeats, and starts its own workers; its stdin is its lifeline, as over SSH. So one
// machine can run a job of hundreds or thousands of nodes through the head's real code, for
// tests and benchmarks of the head and the server at scale. Past --tree_width nodes the launch
// tree is the one SSH would build (transport/tree.h): the head starts its children's agents, and
// each of those starts its own children's, all on this machine.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "launcher/options.h"
#include "transport/transport.h"
#include "transport/tree.h"

namespace mlrun::transport {

/// Checks --launcher sim's preconditions (the nodes come from --hostfile or -H) and says why in
/// o.launcher_why. Returns the errors.
std::vector<std::string> choose_sim_launcher(Options& o);

/// The children of one node of the launch tree, each started as a process on this machine when
/// Subtree::start hands it its job. Nothing is connected up front, so it cannot fail here; a
/// child whose agent cannot start is reported lost.
std::unique_ptr<Subtree> local_subtree(std::vector<TreeNode> children);

/// The transport that starts the head's children of the launch tree over nodes (plan_tree with
/// tree_width: every node when there are at most tree_width) on this machine.
std::unique_ptr<Transport> make_local_transport(const std::vector<AgentNode>& nodes,
                                                int tree_width);

}  // namespace mlrun::transport
