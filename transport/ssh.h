// The SSH transport: one libssh connection per host, the agent's job and token on its stdin,
// which then stays open as the agent's lifeline (launcher/head.h RemoteAgents does the work).
// Past --tree_width hosts the connections form a tree (transport/tree.h): the head connects to
// its children only, and each agent with children connects to those the same way
// (connect_subtree).
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "transport/transport.h"
#include "transport/tree.h"

namespace mlrun::transport {

/// The children of one node of the launch tree over SSH: connects to every child at once and
/// starts each one's agent right after its own connect, its job held back until Subtree::start.
/// On any failure returns nullptr with one line per unreachable host in errors, and nothing is
/// connected: the agents already started read the end of their stdin before any job and exit
/// without starting anything.
std::unique_ptr<Subtree> connect_subtree(std::vector<TreeNode> children,
                                         std::chrono::milliseconds connect_timeout,
                                         std::vector<std::string>& errors);

/// Connects to the head's children of the launch tree over nodes (plan_tree with tree_width:
/// every node when there are at most tree_width), starting each child's agent right after its
/// own connect (connect_subtree). On any failure returns nullptr with one line per
/// unreachable host in errors, and nothing is connected or left running.
std::unique_ptr<Transport> connect_ssh(const std::vector<AgentNode>& nodes, int tree_width,
                                       std::chrono::milliseconds connect_timeout,
                                       std::vector<std::string>& errors);

}  // namespace mlrun::transport
