#include "transport/tree_agent.h"

#include <fmt/format.h>

#include <mlrun/rendezvous.hpp>

#include "transport/local.h"
#include "worker/log.h"
#include "worker/net.h"

namespace mlrun {
namespace {

// Aborts the job on its rendezvous; a job already aborted, or a server gone, needs nothing more.
void abort_job(const transport::AgentJob& job, const std::string& reason) {
  try {
    rendezvous::ClientOptions options;
    options.job_id = job.job_id;
    options.connect_timeout = std::chrono::seconds(10);
    auto client = rendezvous::Client::connect(job.endpoint, job.token, options);
    client.abort(reason);
  } catch (const std::exception& e) {
    log::debug("tree: cannot abort the job ({}): {}", reason, e.what());
  }
}

}  // namespace

std::string lost_reason(int node_rank, const std::string& host, const std::string& why) {
  return node_rank < 0 ? why : fmt::format("node {} ({}) lost: {}", node_rank, host, why);
}

std::unique_ptr<transport::Subtree> start_children(const transport::AgentJob& job) {
  auto children = job.children;
  if (children.empty()) return nullptr;
  const std::string here = host_name();
  std::vector<std::string> errors;
  auto names = children;  // connect_subtree() takes the list; the names are for the reason.
  auto subtree = job.simulated ? transport::local_subtree(std::move(children))
                               : transport::connect_subtree(std::move(children),
                                                            std::chrono::seconds(10), errors);
  if (!subtree) {
    // Every unreachable child by name, with what below it was not started either.
    std::vector<std::string> parts;
    for (const auto& e : errors) {
      std::string part = fmt::format("{} (from {}, its parent in the launch tree)", e, here);
      for (const auto& c : names) {
        if (e.rfind(c.node.host + ":", 0) != 0) continue;
        std::string below = transport::subtree_list(c);
        part =
            fmt::format("node {} {}{}", c.node.node_rank, part,
                        below.empty() ? "" : "; so the agents below it are not started: " + below);
      }
      parts.push_back(std::move(part));
    }
    abort_job(job, fmt::format("cannot start every agent: {}", fmt::join(parts, "; ")));
    return nullptr;
  }
  subtree->start(job, here, [job](int node_rank, const std::string& host, const std::string& why) {
    abort_job(job, lost_reason(node_rank, host, why));
  });
  return subtree;
}

}  // namespace mlrun
