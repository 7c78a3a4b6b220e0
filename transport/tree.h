// The launch tree (docs/multinode.md "The launch tree"): past --tree_width hosts the head starts
// agents on its children only, and each of those agents starts the agents of its own children
// over SSH (or, with --launcher sim, as processes on this machine), with the same settings,
// relaying their output and reporting their loss. The tree is for starting processes and
// carrying output; every node still joins the one rendezvous on the head directly, so ranks,
// failures and teardown are those of a flat launch.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "transport/agent_job.h"
#include "transport/transport.h"

namespace mlrun {
class RemoteAgents;
}

namespace mlrun::transport {

/// The agents one node of the launch tree starts: the head's children, or an interior agent's,
/// over SSH (connect_subtree, transport/ssh.h) or on this machine (local_subtree,
/// transport/local.h). Each child is handed the same job description with its own node and its
/// own subtree (AgentJob::children); a child lost is reported with the agents it started named
/// (describe_subtree).
class Subtree {
 public:
  /// agents started (or, over SSH, connected) by the transport, one per child in order;
  /// command is what names each child's agent in debug lines.
  Subtree(std::unique_ptr<RemoteAgents> agents, std::vector<TreeNode> children,
          std::string command);
  ~Subtree();
  /// This machine's address as the first child sees it.
  std::string local_address() const;
  /// Starts every child's agent with job (with the token) as that child is handed it
  /// (job_for_node); parent, when not empty, names this host to the children.
  void start(const AgentJob& job, const std::string& parent, LostCallback on_lost);
  /// As Transport::finish.
  void finish(std::chrono::milliseconds bound);

 private:
  std::unique_ptr<RemoteAgents> agents_;
  std::vector<TreeNode> children_;
  std::string command_;
};

/// The head's children: a radix tree of the given width over nodes in their order, breadth
/// first (Open MPI's layout): nodes 0..width-1 are the head's, node i's are nodes
/// (i+1)*width .. (i+1)*width+width-1. Every node is one of the head's when there are at most
/// width of them (no tree). width >= 1.
std::vector<TreeNode> plan_tree(const std::vector<AgentNode>& nodes, int width);

/// Levels of agents below the head (0: none, 1: all started by the head).
int tree_depth(const std::vector<TreeNode>& roots);

/// Every node below t (not t itself), in node-rank order.
std::vector<const AgentNode*> subtree_nodes(const TreeNode& t);

/// The most nodes subtree_list names: a lost agent near the top of a tree of thousands has
/// thousands below it, and the reason travels in an abort of at most 4 KiB (rendezvous).
inline constexpr std::size_t kListedBelow = 16;

/// The nodes below t, "host7 (node 6), host8 (node 7)", the first kListedBelow of them and then
/// how many more; "" for a leaf.
std::string subtree_list(const TreeNode& t);

/// What a lost interior node takes with it, for the job's abort reason: "" for a leaf, else
/// "; the N agents it started went with it: host7 (node 6), ...".
std::string describe_subtree(const TreeNode& t);

}  // namespace mlrun::transport
