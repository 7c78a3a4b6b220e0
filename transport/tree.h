// The launch tree (docs/multinode.md "The launch tree"): past --tree_width hosts the head starts
// agents on its children only, and each of those agents starts the agents of its own children
// over SSH, with the same settings, relaying their output and reporting their loss. The tree is
// for starting processes and carrying output; every node still joins the one rendezvous on the
// head directly, so ranks, failures and teardown are those of a flat launch.
#pragma once

#include <string>
#include <vector>

#include "transport/agent_job.h"

namespace mlrun::transport {

/// The head's children: a radix tree of the given width over nodes in their order, breadth
/// first (Open MPI's layout): nodes 0..width-1 are the head's, node i's are nodes
/// (i+1)*width .. (i+1)*width+width-1. Every node is one of the head's when there are at most
/// width of them (no tree). width >= 1.
std::vector<TreeNode> plan_tree(const std::vector<AgentNode>& nodes, int width);

/// Levels of agents below the head (0: none, 1: all started by the head).
int tree_depth(const std::vector<TreeNode>& roots);

/// Every node below t (not t itself), in node-rank order.
std::vector<const AgentNode*> subtree_nodes(const TreeNode& t);

/// The nodes below t, "host7 (node 6), host8 (node 7)"; "" for a leaf.
std::string subtree_list(const TreeNode& t);

/// What a lost interior node takes with it, for the job's abort reason: "" for a leaf, else
/// "; the N agents it started went with it: host7 (node 6), ...".
std::string describe_subtree(const TreeNode& t);

}  // namespace mlrun::transport
