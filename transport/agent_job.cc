#include "transport/agent_job.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

namespace mlrun::transport {
namespace {

using nlohmann::json;

// The field names, each written once: the encoder and the decoder both use these.
constexpr const char* kEndpoint = "endpoint";
constexpr const char* kPort = "port";
constexpr const char* kToken = "token";
constexpr const char* kJobId = "job_id";
constexpr const char* kNnodes = "nnodes";
constexpr const char* kCwd = "cwd";
constexpr const char* kEnv = "env";
constexpr const char* kArgs = "args";
constexpr const char* kGraceMs = "grace_ms";
constexpr const char* kHeartbeatIntervalMs = "heartbeat_interval_ms";
constexpr const char* kHeartbeatTimeoutMs = "heartbeat_timeout_ms";
constexpr const char* kLogLevel = "log_level";
constexpr const char* kNodeRank = "node_rank";
constexpr const char* kNproc = "nproc";
constexpr const char* kGpus = "gpus";
constexpr const char* kParent = "parent";
constexpr const char* kChildren = "children";
constexpr const char* kSimulated = "simulated";
constexpr const char* kNodes = "nodes";
constexpr const char* kHost = "host";
constexpr const char* kUser = "user";
constexpr const char* kSshPort = "port";

// One object of the record being read, and where it is in the record ("nodes[1]."), for the
// errors.
class Reader {
 public:
  Reader(const json& j, std::string where) : j_(j), where_(std::move(where)) {
    if (!j_.is_object()) throw AgentJobError(fmt::format("{}: not an object", name_of("")));
  }
  bool has(const char* field) const { return j_.contains(field); }

  template <typename T>
  T required(const char* field) const {
    if (!has(field)) throw AgentJobError(fmt::format("field {}: missing", name_of(field)));
    return get<T>(field);
  }
  template <typename T>
  T optional(const char* field, T fallback) const {
    return has(field) ? get<T>(field) : fallback;
  }
  const json& at(const char* field) const {
    if (!has(field)) throw AgentJobError(fmt::format("field {}: missing", name_of(field)));
    return j_.at(field);
  }
  std::string name_of(const std::string& field) const {
    std::string name = where_ + field;
    return name.empty() ? "the record" : name;
  }

 private:
  template <typename T>
  T get(const char* field) const {
    const json& v = j_.at(field);
    try {
      return v.get<T>();
    } catch (const json::exception&) {
      throw AgentJobError(fmt::format("field {}: not {}", name_of(field), kind<T>()));
    }
  }
  template <typename T>
  static const char* kind() {
    if constexpr (std::is_same_v<T, std::string>) return "a string";
    if constexpr (std::is_same_v<T, bool>) return "true or false";
    if constexpr (std::is_integral_v<T>) return "an integer";
    return "a list of the right type";
  }
  const json& j_;
  std::string where_;
};

// A list field's entries, each as a Reader that names its place.
template <typename F>
void for_each_entry(const Reader& r, const char* field, F&& f) {
  const json& list = r.at(field);
  if (!list.is_array()) throw AgentJobError(fmt::format("field {}: not a list", r.name_of(field)));
  for (std::size_t i = 0; i < list.size(); ++i) {
    f(Reader(list[i], fmt::format("{}[{}].", r.name_of(field), i)));
  }
}

json encode_node(const AgentNode& n) {
  return {{kNodeRank, n.node_rank}, {kHost, n.host},   {kUser, n.user},
          {kSshPort, n.port},       {kNproc, n.nproc}, {kGpus, n.gpus}};
}

AgentNode decode_node(const Reader& r) {
  AgentNode n;
  n.node_rank = r.optional<int>(kNodeRank, 0);
  n.host = r.required<std::string>(kHost);
  n.user = r.optional<std::string>(kUser, "");
  n.port = r.optional<int>(kSshPort, 0);
  n.nproc = r.required<int>(kNproc);
  n.gpus = r.optional<std::vector<int>>(kGpus, {});
  return n;
}

json encode_tree(const std::vector<TreeNode>& children) {
  json list = json::array();
  for (const auto& c : children) {
    json j = encode_node(c.node);
    if (!c.children.empty()) j[kChildren] = encode_tree(c.children);
    list.push_back(std::move(j));
  }
  return list;
}

std::vector<TreeNode> decode_tree(const Reader& r) {
  std::vector<TreeNode> out;
  for_each_entry(r, kChildren, [&](const Reader& entry) {
    TreeNode t{decode_node(entry), {}};
    entry.required<int>(kNodeRank);  // A child's rank is its own, never a default.
    if (entry.has(kChildren)) t.children = decode_tree(entry);
    out.push_back(std::move(t));
  });
  return out;
}

// The job's fields, the same on every node.
void decode_job_fields(const Reader& r, AgentJob& job) {
  job.endpoint = r.required<std::string>(kEndpoint);
  job.port = r.required<int>(kPort);
  job.job_id = r.required<std::string>(kJobId);
  job.nnodes = r.required<int>(kNnodes);
  job.cwd = r.required<std::string>(kCwd);
  const json& env = r.at(kEnv);
  if (!env.is_object()) throw AgentJobError(fmt::format("field {}: not an object", kEnv));
  for (const auto& [name, value] : env.items()) {
    if (!value.is_string()) {
      throw AgentJobError(fmt::format("field {}.{}: not a string", kEnv, name));
    }
    job.env.emplace_back(name, value.get<std::string>());
  }
  job.args = r.required<std::vector<std::string>>(kArgs);
  // A head that predates them sends no grace, heartbeat settings or level: the defaults.
  job.grace = std::chrono::milliseconds(r.optional<long>(kGraceMs, 0));
  job.heartbeat_interval = std::chrono::milliseconds(r.optional<long>(kHeartbeatIntervalMs, 0));
  job.heartbeat_timeout = std::chrono::milliseconds(r.optional<long>(kHeartbeatTimeoutMs, 0));
  job.log_level = r.optional<std::string>(kLogLevel, "warning");
}

}  // namespace

AgentJob job_for_node(const AgentJob& job, const TreeNode& node, const std::string& parent) {
  AgentJob out = job;
  out.nodes.clear();
  out.node_rank = node.node.node_rank;
  out.nproc = node.node.nproc;
  out.gpus = node.node.gpus;
  out.parent = parent;
  out.children = node.children;
  return out;
}

std::string encode_agent_job(const AgentJob& job) {
  json env = json::object();
  for (const auto& [name, value] : job.env) env[name] = value;
  json j = {{kEndpoint, job.endpoint},
            {kPort, job.port},
            {kJobId, job.job_id},
            {kNnodes, job.nnodes},
            {kCwd, job.cwd},
            {kEnv, env},
            {kArgs, job.args},
            {kGraceMs, job.grace.count()},
            {kHeartbeatIntervalMs, job.heartbeat_interval.count()},
            {kHeartbeatTimeoutMs, job.heartbeat_timeout.count()},
            {kLogLevel, job.log_level}};
  if (!job.token.empty()) j[kToken] = job.token;
  if (job.node_rank >= 0) {
    j[kNodeRank] = job.node_rank;
    j[kNproc] = job.nproc;
    j[kGpus] = job.gpus;
    if (!job.parent.empty()) j[kParent] = job.parent;
    if (!job.children.empty()) j[kChildren] = encode_tree(job.children);
    if (job.simulated) j[kSimulated] = true;
  } else {
    json list = json::array();
    for (const auto& n : job.nodes)
      list.push_back({{kHost, n.host}, {kNproc, n.nproc}, {kGpus, n.gpus}});
    j[kNodes] = list;
  }
  return j.dump();
}

AgentJob decode_agent_job(std::string_view text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw AgentJobError(fmt::format("not JSON: {}", e.what()));
  }
  Reader r(j, "");
  AgentJob job;
  decode_job_fields(r, job);
  if (!r.has(kNodeRank)) {
    // Every node, the agent's own among them; the token comes another way.
    job.token = r.optional<std::string>(kToken, "");
    for_each_entry(r, kNodes,
                   [&](const Reader& entry) { job.nodes.push_back(decode_node(entry)); });
    for (std::size_t i = 0; i < job.nodes.size(); ++i) job.nodes[i].node_rank = static_cast<int>(i);
    return job;
  }
  job.token = r.required<std::string>(kToken);
  job.node_rank = r.required<int>(kNodeRank);
  if (job.node_rank < 0 || job.node_rank >= job.nnodes) {
    throw AgentJobError(
        fmt::format("field {}: {} is not a node of {}", kNodeRank, job.node_rank, job.nnodes));
  }
  job.nproc = r.required<int>(kNproc);
  job.gpus = r.optional<std::vector<int>>(kGpus, {});
  job.parent = r.optional<std::string>(kParent, "");
  if (r.has(kChildren)) job.children = decode_tree(r);
  job.simulated = r.optional<bool>(kSimulated, false);
  return job;
}

}  // namespace mlrun::transport
