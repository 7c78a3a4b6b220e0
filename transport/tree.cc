#include "transport/tree.h"

#include <algorithm>
#include <functional>

#include <fmt/format.h>

namespace mlrun::transport {

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
  std::vector<std::string> names;
  for (const auto* n : subtree_nodes(t)) {
    names.push_back(fmt::format("{} (node {})", n->host, n->node_rank));
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
