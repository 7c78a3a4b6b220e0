#include "coordinator/node.h"

#include <optional>
#include <stdexcept>

#include <fmt/format.h>

#include "coordinator/coordinator.h"
#include "launcher/summary.h"
#include "worker/cgroup.h"

namespace mlrun {

std::vector<std::string> parse_rdzv_conf(const std::string& text, RdzvConf& conf) {
  std::vector<std::string> errors;
  std::size_t start = 0;
  while (start <= text.size() && !text.empty()) {
    std::size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(start, end - start);
    start = end + 1;
    if (item.empty()) {
      if (end >= text.size()) break;
      continue;
    }
    auto eq = item.find('=');
    if (eq == std::string::npos) {
      errors.push_back(fmt::format("--rdzv_conf: '{}' is not key=value", item));
      continue;
    }
    std::string name = item.substr(0, eq), value = item.substr(eq + 1);
    std::chrono::milliseconds* target = name == "join_timeout"         ? &conf.join_timeout
                                        : name == "last_call_timeout"  ? &conf.last_call
                                        : name == "heartbeat_interval" ? &conf.heartbeat_interval
                                        : name == "heartbeat_timeout"  ? &conf.heartbeat_timeout
                                                                       : nullptr;
    if (target == nullptr) continue;  // torchrun's other keys: accepted, not used.
    double seconds = -1;
    try {
      std::size_t used = 0;
      seconds = std::stod(value, &used);
      if (used != value.size()) seconds = -1;
    } catch (const std::exception&) {
    }
    bool zero_ok = name == "last_call_timeout";
    if (!(seconds > 0 || (zero_ok && seconds == 0)) || seconds > 4e6) {
      errors.push_back(fmt::format("--rdzv_conf {}={}: not a number of seconds{}", name, value,
                                   zero_ok ? " (0 or more)" : " above 0"));
      continue;
    }
    *target = std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000));
  }
  if (errors.empty() && conf.heartbeat_timeout <= conf.heartbeat_interval) {
    errors.push_back(fmt::format(
        "--rdzv_conf: heartbeat_timeout ({} ms) must be longer than heartbeat_interval ({} ms)",
        conf.heartbeat_timeout.count(), conf.heartbeat_interval.count()));
  }
  return errors;
}

int run_node(const NodeJob& job, const NodeHooks& hooks, Lifeline& lifeline, int lifeline_fd) {
  // Teardown reaches what leaves the workers' process groups where the machine allows a cgroup
  // (docs/launcher.md, Teardown); it outlives the spawner and the coordinator's agent.
  std::unique_ptr<JobCgroup> cgroup = make_node_cgroup(job.job_id, lifeline);
  auto spawner = make_posix_spawner(cgroup.get());
  auto rendezvous = coordinator::make_tcp_connector(job.endpoint, job.token);
  std::optional<coordinator::NodeCoordinator> node;
  try {
    node.emplace(job, hooks, *spawner, *rendezvous, lifeline);
  } catch (const rendezvous::AuthError& e) {
    throw std::runtime_error(refusal_reason(job, e));
  }
  return node->run(lifeline_fd).exit_code;
}

std::string refusal_reason(const NodeJob& job, const std::exception& refusal) {
  // launcher/run.cc shared_token: nodes that name one server differently derive different ones.
  if (job.token.rfind("mlrun-derived:", 0) != 0) return refusal.what();
  return fmt::format(
      "{} (this node's token is derived from --rdzv_id and the endpoint as written here, {}: "
      "every node must write both alike, and 127.0.0.1, localhost and a host name differ; or give "
      "every node the same MLRUN_RDZV_TOKEN)",
      refusal.what(), job.endpoint);
}

int watch_job(const std::string& endpoint, const std::string& token, const std::string& job_id,
              int nnodes, int max_restarts, const HeadSignals& signals) {
  // A signal aborts the job (signals' callback); this thread waits on the rendezvous and so
  // wakes with the abort.
  int code = 1;
  try {
    rendezvous::ClientOptions options;
    options.job_id = job_id;
    for (int g = 0;; ++g) {
      options.generation = g;
      auto c = rendezvous::Client::connect(endpoint, token, options);
      coordinator::Settled v = coordinator::settle_attempt(c, g);
      if (v.failed) fmt::print(stderr, "{}", format_record_summary(v.record));
      if (v.failed && g < max_restarts) {
        fmt::print(stderr, "mlrun: restarting every node's workers ({} of {} restarts)\n", g + 1,
                   max_restarts);
        continue;
      }
      code = v.failed ? v.code : 0;
      break;
    }
  } catch (const rendezvous::AbortedError& e) {
    fmt::print(stderr, "mlrun: job aborted: {}\n", e.detail());
    code = signals.signal() != 0 ? 128 + signals.signal() : 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "mlrun: error: {}\n", e.what());
  }
  return code;
}

}  // namespace mlrun
