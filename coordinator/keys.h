// The rendezvous keys the nodes of a job coordinate through (docs/multinode.md). The attempt
// number (generation, or an elastic job's round) is in every key of an attempt, so no attempt
// ever sees another's state.
//   mlrun/G/master        "addr:port" of MASTER_ADDR/MASTER_PORT, set by node 0: the rendezvous
//                         endpoint with --store mlrun, else a port free on node 0
//   mlrun/G/failed        the first failure's record (compare-and-set: the first one wins)
//   mlrun/G/notify/N      "fail" (a failure somewhere), "change" (elastic: the membership
//                         changed) or "end" (node N's group ended)
//   mlrun/G/result/N      node N's group ended (coordinator/records.h NodeResult)
//   mlrun/G/first_bad     the first failed node's result; mlrun/G/results counts the results
//                         and the last one sets mlrun/G/settled (below)
//   mlrun/G/changed       elastic: the membership change that stopped the round
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <fmt/format.h>

namespace mlrun::coordinator {

inline std::string key(int g, std::string_view name) {
  return fmt::format("mlrun/{}/{}", g, name);
}
inline std::string notify_key(int g, int node) {
  return fmt::format("mlrun/{}/notify/{}", g, node);
}
inline std::string result_key(int g, int node) {
  return fmt::format("mlrun/{}/result/{}", g, node);
}

/// mlrun/G/results: each node adds result_delta(its group succeeded), so the count holds the
/// results in its low 32 bits and the failures above them. The node whose add brings in the last
/// result sets mlrun/G/settled to settled_value(count): kSettledOk when no node failed, and
/// nobody reads further; "1" when one did (mlrun/G/failed and first_bad say how). A job's nodes
/// run one mlrun: one that added 1 for a failure would be counted a success.
inline constexpr std::int64_t kFailedResult = std::int64_t{1} << 32;
inline constexpr std::string_view kSettledOk = "ok";
inline std::int64_t result_delta(bool ok) {
  return ok ? 1 : 1 + kFailedResult;
}
inline bool all_results_in(std::int64_t count, int nnodes) {
  return (count & (kFailedResult - 1)) == nnodes;
}
inline std::string settled_value(std::int64_t count) {
  return count < kFailedResult ? std::string(kSettledOk) : "1";
}

/// Elastic jobs: the server's membership rounds of this group (docs/protocol.md). The server
/// writes `mlrun/elastic/nodes/R/change` when a node joins or is lost while round R runs.
inline constexpr std::string_view kElasticGroup = "mlrun/elastic/nodes";
inline std::string change_key(int round) {
  return fmt::format("{}/{}/change", kElasticGroup, round);
}

/// A node that leaves an elastic job on SIGTERM says so here before it goes, so that its peers
/// name the cause instead of "its connection to the rendezvous closed".
inline std::string left_key(std::string_view member) {
  return fmt::format("mlrun/elastic/left/{}", member);
}

/// After its last attempt, node N is done with the rendezvous (the job's server waits for all).
inline std::string done_key(int node) {
  return fmt::format("mlrun/done/{}", node);
}

}  // namespace mlrun::coordinator
