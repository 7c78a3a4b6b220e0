#include "transport/tree.h"

#include <algorithm>
#include <functional>

#include <fmt/format.h>

#include "launcher/head.h"

namespace mlrun::transport {

Subtree::Subtree(std::unique_ptr<RemoteAgents> agents, std::vector<TreeNode> children,
                 std::string command)
    : agents_(std::move(agents)), children_(std::move(children)), command_(std::move(command)) {}

Subtree::~Subtree() = default;

std::string Subtree::local_address() const {
  return agents_->local_address();
}

void Subtree::start(const AgentJob& job, const std::string& parent, LostCallback on_lost) {
  std::vector<RemoteAgents::Agent> agents;
  for (const auto& c : children_) {
    // With the token: on stdin, never on the command line.
    agents.push_back(
        {c.node.node_rank, command_, encode_agent_job(job_for_node(job, c, parent)) + "\n"});
  }
  // A lost child takes its own children with it: the reason names them.
  std::vector<std::pair<int, std::string>> below;
  for (const auto& c : children_) below.emplace_back(c.node.node_rank, describe_subtree(c));
  std::string seen = parent.empty() ? "" : fmt::format(" (seen by {}, its parent)", parent);
  agents_->start(std::move(agents),
                 [below = std::move(below), seen, on_lost = std::move(on_lost)](
                     int node_rank, const std::string& host, const std::string& why) {
                   std::string subtree;
                   for (const auto& [rank, text] : below) {
                     if (rank == node_rank) subtree = text;
                   }
                   on_lost(node_rank, host, why + seen + subtree);
                 });
}

void Subtree::finish(std::chrono::milliseconds bound) {
  agents_->finish(bound);
}

std::vector<TreeNode> plan_tree(const std::vector<AgentNode>& nodes, int width) {
  const std::size_t w = static_cast<std::size_t>(std::max(1, width));
  const std::size_t n = nodes.size();
  // Node i's children are (i+1)*w ...: each node is built after its parent, from the index alone.
  std::function<TreeNode(std::size_t)> build = [&](std::size_t i) {
    TreeNode t{nodes[i], {}};
    for (std::size_t c = (i + 1) * w; c < n && c < (i + 2) * w; ++c) t.children.push_back(build(c));
    return t;
  };
  std::vector<TreeNode> roots;
  for (std::size_t i = 0; i < n && i < w; ++i) roots.push_back(build(i));
  return roots;
}

int tree_depth(const std::vector<TreeNode>& roots) {
  int depth = 0;
  for (const auto& r : roots) depth = std::max(depth, 1 + tree_depth(r.children));
  return depth;
}

std::vector<const AgentNode*> subtree_nodes(const TreeNode& t) {
  std::vector<const AgentNode*> out;
  std::function<void(const TreeNode&)> walk = [&](const TreeNode& x) {
    for (const auto& c : x.children) {
      out.push_back(&c.node);
      walk(c);
    }
  };
  walk(t);
  std::sort(out.begin(), out.end(),
            [](const AgentNode* a, const AgentNode* b) { return a->node_rank < b->node_rank; });
  return out;
}

std::string subtree_list(const TreeNode& t) {
  auto below = subtree_nodes(t);
  std::vector<std::string> names;
  for (std::size_t i = 0; i < below.size() && i < kListedBelow; ++i) {
    names.push_back(fmt::format("{} (node {})", below[i]->host, below[i]->node_rank));
  }
  if (below.size() > kListedBelow) {
    names.push_back(
        fmt::format("and {} more (`--dry-run` shows the whole tree)", below.size() - kListedBelow));
  }
  return fmt::format("{}", fmt::join(names, ", "));
}

std::string describe_subtree(const TreeNode& t) {
  auto count = subtree_nodes(t).size();
  if (count == 0) return "";
  return fmt::format("; the {} agent{} below it in the launch tree went with it: {}", count,
                     count == 1 ? "" : "s", subtree_list(t));
}

}  // namespace mlrun::transport
