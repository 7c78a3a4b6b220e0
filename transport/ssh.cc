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

SshSubtree::SshSubtree(std::unique_ptr<RemoteAgents> agents, std::vector<TreeNode> children)
    : agents_(std::move(agents)), children_(std::move(children)) {}

SshSubtree::~SshSubtree() = default;

std::unique_ptr<SshSubtree> SshSubtree::connect(std::vector<TreeNode> children,
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
  return std::unique_ptr<SshSubtree>(new SshSubtree(std::move(agents), std::move(children)));
}

std::string SshSubtree::local_address() const {
  return agents_->local_address();
}

void SshSubtree::start(const AgentJob& job, const std::string& parent, LostCallback on_lost) {
  std::vector<RemoteAgents::Agent> agents;
  for (const auto& c : children_) {
    // With the token: on stdin, never on the command line.
    agents.push_back({c.node.node_rank, agent_command_line(),
                      encode_agent_job(job_for_node(job, c, parent)) + "\n"});
  }
  // A lost child takes its own children's connections with it: the reason names them.
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

void SshSubtree::finish(std::chrono::milliseconds bound) {
  agents_->finish(bound);
}

namespace {

class SshTransport : public Transport {
 public:
  explicit SshTransport(std::unique_ptr<SshSubtree> children) : children_(std::move(children)) {}
  std::string name() const override { return "ssh"; }
  std::string head_address() const override { return children_->local_address(); }

  void start(const AgentJob& job, const std::vector<AgentNode>& nodes,
             LostCallback on_lost) override {
    if (nodes.empty()) return;
    children_->start(job, "", std::move(on_lost));
  }

  void finish(std::chrono::milliseconds bound) override { children_->finish(bound); }

 private:
  std::unique_ptr<SshSubtree> children_;
};

}  // namespace

std::unique_ptr<Transport> connect_ssh(const std::vector<AgentNode>& nodes, int tree_width,
                                       std::chrono::milliseconds connect_timeout,
                                       std::vector<std::string>& errors) {
  auto children = SshSubtree::connect(plan_tree(nodes, tree_width), connect_timeout, errors);
  if (!children) return nullptr;
  return std::make_unique<SshTransport>(std::move(children));
}

}  // namespace mlrun::transport
