// The SSH transport: one libssh connection per host, the agent's job and token on its stdin,
// which then stays open as the agent's lifeline (launcher/head.h RemoteAgents does the work).
// Past --tree_width hosts the connections form a tree (transport/tree.h): the head connects to
// its children only, and each agent with children connects to those the same way (SshSubtree).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "transport/transport.h"
#include "transport/tree.h"

namespace mlrun {
class RemoteAgents;
}

namespace mlrun::transport {

/// The agents one node of the launch tree starts over SSH: the head's children, or an interior
/// agent's. Each child is handed the same job description with its own node and its own subtree
/// (AgentJob::children); a child lost is reported with the agents it started named
/// (describe_subtree).
class SshSubtree {
 public:
  /// Connects to every child at once and starts each one's agent right after its own connect,
  /// its job held back until start(). On any failure returns nullptr with one line per
  /// unreachable host in errors, and nothing is connected: the agents already started read the
  /// end of their stdin before any job and exit without starting anything.
  static std::unique_ptr<SshSubtree> connect(std::vector<TreeNode> children,
                                             std::chrono::milliseconds connect_timeout,
                                             std::vector<std::string>& errors);
  ~SshSubtree();
  /// This machine's address as the first child sees it.
  std::string local_address() const;
  /// Starts every child's agent with job (with the token) as that child is handed it
  /// (job_for_node); parent, when not empty, names this host to the children.
  void start(const AgentJob& job, const std::string& parent, LostCallback on_lost);
  /// As Transport::finish.
  void finish(std::chrono::milliseconds bound);

 private:
  SshSubtree(std::unique_ptr<RemoteAgents> agents, std::vector<TreeNode> children);
  std::unique_ptr<RemoteAgents> agents_;
  std::vector<TreeNode> children_;
};

/// Connects to the head's children of the launch tree over nodes (plan_tree with tree_width:
/// every node when there are at most tree_width), starting each child's agent right after its
/// own connect (SshSubtree::connect). On any failure returns nullptr with one line per
/// unreachable host in errors, and nothing is connected or left running.
std::unique_ptr<Transport> connect_ssh(const std::vector<AgentNode>& nodes, int tree_width,
                                       std::chrono::milliseconds connect_timeout,
                                       std::vector<std::string>& errors);

}  // namespace mlrun::transport
