#include "transport/ssh.h"

#include <fmt/format.h>

#include "launcher/head.h"
#include "launcher/plan.h"

namespace mlrun::transport {
namespace {

// What runs on every host: this binary's agent, through the remote user's shell.
std::string agent_command_line() {
  return fmt::format("exec {} agent", shell_quote(self_path()));
}

}  // namespace

std::unique_ptr<Subtree> connect_subtree(std::vector<TreeNode> children,
                                         std::chrono::milliseconds connect_timeout,
                                         std::vector<std::string>& errors) {
  std::vector<RemoteAgents::Target> targets;
  for (const auto& c : children) {
    HostEntry h;
    h.host = c.node.host;
    h.user = c.node.user;
    h.port = c.node.port;
    targets.push_back({std::move(h), c.node.node_rank});
  }
  // Each child's agent starts right after its own connect and waits for its job on stdin.
  auto agents = RemoteAgents::connect(targets, agent_command_line(), connect_timeout, errors);
  if (!agents) return nullptr;
  return std::make_unique<Subtree>(std::move(agents), std::move(children), agent_command_line());
}

namespace {

class SshTransport : public Transport {
 public:
  explicit SshTransport(std::unique_ptr<Subtree> children) : children_(std::move(children)) {}
  std::string name() const override { return "ssh"; }
  std::string head_address() const override { return children_->local_address(); }

  void start(const AgentJob& job, const std::vector<AgentNode>& nodes,
             LostCallback on_lost) override {
    if (nodes.empty()) return;
    children_->start(job, "", std::move(on_lost));
  }

  void finish(std::chrono::milliseconds bound) override { children_->finish(bound); }

 private:
  std::unique_ptr<Subtree> children_;
};

}  // namespace

std::unique_ptr<Transport> connect_ssh(const std::vector<AgentNode>& nodes, int tree_width,
                                       std::chrono::milliseconds connect_timeout,
                                       std::vector<std::string>& errors) {
  auto children = connect_subtree(plan_tree(nodes, tree_width), connect_timeout, errors);
  if (!children) return nullptr;
  return std::make_unique<SshTransport>(std::move(children));
}

}  // namespace mlrun::transport
