#include "transport/transport.h"

namespace mlrun::transport {

nlohmann::json agent_description(const AgentJob& job, const std::vector<AgentNode>& nodes,
                                 int node) {
  nlohmann::json env = nlohmann::json::object();
  for (const auto& [name, value] : job.env) env[name] = value;
  nlohmann::json j = {{"endpoint", job.endpoint},
                      {"port", job.port},
                      {"job_id", job.job_id},
                      {"nnodes", job.nnodes},
                      {"cwd", job.cwd},
                      {"env", env},
                      {"args", job.args},
                      {"grace_ms", job.grace.count()},
                      {"heartbeat_interval_ms", job.heartbeat_interval.count()},
                      {"heartbeat_timeout_ms", job.heartbeat_timeout.count()},
                      {"log_level", job.log_level}};
  if (node >= 0) {
    j["node_rank"] = nodes[node].node_rank;
    j["nproc"] = nodes[node].nproc;
    j["gpus"] = nodes[node].gpus;
    return j;
  }
  nlohmann::json list = nlohmann::json::array();
  for (const auto& n : nodes) {
    list.push_back({{"host", n.host}, {"nproc", n.nproc}, {"gpus", n.gpus}});
  }
  j["nodes"] = list;
  return j;
}

}  // namespace mlrun::transport
