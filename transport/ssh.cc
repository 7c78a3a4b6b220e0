#include "transport/ssh.h"

#include <fmt/format.h>

#include "launcher/head.h"
#include "launcher/plan.h"

namespace mlrun::transport {
namespace {

class SshTransport : public Transport {
 public:
  explicit SshTransport(std::unique_ptr<RemoteAgents> agents) : agents_(std::move(agents)) {}
  std::string name() const override { return "ssh"; }
  std::string head_address() const override { return agents_->local_address(); }

  void start(const AgentJob& job, const std::vector<AgentNode>& nodes,
             LostCallback on_lost) override {
    std::vector<RemoteAgents::Agent> agents;
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      nlohmann::json payload = agent_description(job, nodes, static_cast<int>(i));
      payload["token"] = job.token;  // On stdin, never on the command line.
      agents.push_back({nodes[i].node_rank, fmt::format("exec {} agent", shell_quote(self_path())),
                        payload.dump() + "\n"});
    }
    agents_->start(std::move(agents), std::move(on_lost));
  }

  void finish(std::chrono::milliseconds bound) override { agents_->finish(bound); }

 private:
  std::unique_ptr<RemoteAgents> agents_;
};

}  // namespace

std::unique_ptr<Transport> connect_ssh(const std::vector<AgentNode>& nodes,
                                       std::chrono::milliseconds connect_timeout,
                                       std::vector<std::string>& errors) {
  std::vector<HostEntry> hosts;
  for (const auto& n : nodes) {
    HostEntry h;
    h.host = n.host;
    h.user = n.user;
    h.port = n.port;
    hosts.push_back(std::move(h));
  }
  auto agents = RemoteAgents::connect(hosts, connect_timeout, errors);
  if (!agents) return nullptr;
  return std::make_unique<SshTransport>(std::move(agents));
}

}  // namespace mlrun::transport
