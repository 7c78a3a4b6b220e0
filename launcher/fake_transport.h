// A transport for unit tests of the head's launch logic (launcher/launch_hosts.h): each node's
// "agent" is a thread of the test process that takes part in the job as a node does, over real
// TCP to the head's real rendezvous server, and runs its worker as a real process.
//
// Why not the real run_node on each thread: its event loop reaps with waitpid(-1)
// (worker/agent.cc), so several of them in one process take each other's workers' exits and
// hang. So each fake agent speaks the coordinator's protocol of one attempt itself, as
// coordinator/node.cc does (docs/multinode.md, "The keys of an attempt"): join, node 0's master
// key, the first failure's record and notify keys, its result, the count that settles the
// attempt, the verdict and the done barrier. Its worker runs under a middle process that
// nobody's waitpid(-1) takes (launcher/fake_transport.cc, Worker), so that the head's own node,
// the real run_node, can run beside the fake agents.
//
// Not covered: restarts (attempt 0 only), elastic jobs, heartbeats (the server watches no fake
// node), forwarded signals. Tests only: built into mlrun_unit_tests.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "transport/transport.h"

namespace mlrun::fake {

/// How a fake agent's part of the job ended.
enum class AgentEnd {
  kRunning,           ///< Not ended yet.
  kSucceeded,         ///< Its worker and the job succeeded.
  kFailedHere,        ///< Its worker failed; the job's verdict followed.
  kStoppedByFailure,  ///< A failure elsewhere stopped its worker.
  kAborted,           ///< The job was aborted (detail: the reason).
  kLost,              ///< FakeTransport::lose: it ended as a dead agent does, saying nothing.
  kStopped,           ///< finish() stopped it after its bound (its "lifeline" ended).
  kError,             ///< Anything else (detail).
};

/// What the test sees of one fake agent.
struct AgentRecord {
  int node_rank = -1;
  std::string host;
  bool joined = false;     ///< Joined the rendezvous and started its worker.
  pid_t worker_pgid = -1;  ///< Its worker's process group.
  AgentEnd end = AgentEnd::kRunning;
  std::string detail;
  int code = -1;  ///< The node's exit code, as run_node would return it.
};

/// Each node's worker by its host name: argv, argv[0] a path.
using Workers = std::map<std::string, std::vector<std::string>>;

class FakeTransport : public transport::Transport {
 public:
  /// Each node's one worker is workers[host] if given, else default_worker.
  explicit FakeTransport(Workers workers = {},
                         std::vector<std::string> default_worker = {"/bin/true"});
  ~FakeTransport() override;

  std::string name() const override { return "fake"; }
  std::string head_address() const override { return "127.0.0.1"; }
  void start(const transport::AgentJob& job, const std::vector<transport::AgentNode>& nodes,
             transport::LostCallback on_lost) override;
  void finish(std::chrono::milliseconds bound) override;

  /// Loses node_rank's agent, from a thread of this transport: its worker is killed, it ends
  /// without a word to the rendezvous, then on_lost(node_rank, its host, why) runs (unless
  /// finish() has begun), as the SSH transport reports an agent whose connection closed.
  void lose(int node_rank, const std::string& why);
  /// Waits up to bound until every agent has joined and started its worker (or ended);
  /// returns whether every one joined.
  bool wait_joined(std::chrono::milliseconds bound);

  // What the head did with it.
  bool started() const;
  transport::AgentJob job() const;
  std::vector<transport::AgentNode> nodes() const;
  int finish_calls() const;
  std::chrono::milliseconds finish_bound() const;
  std::vector<AgentRecord> agents() const;
  int running() const;  ///< Agents whose thread has not ended.

  struct Agent;

 private:
  int running_locked() const;
  Workers workers_;
  std::vector<std::string> default_worker_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  bool started_ = false;
  transport::AgentJob job_;
  std::vector<transport::AgentNode> nodes_;
  std::vector<std::unique_ptr<Agent>> agents_;
  std::vector<AgentRecord> records_;  // agents_[i]'s.
  transport::LostCallback on_lost_;
  std::mutex loss_mutex_;  // Held while on_lost runs; finish() takes it to close the reports.
  bool finishing_ = false;
  std::vector<std::thread> loss_threads_;
  int finish_calls_ = 0;
  std::chrono::milliseconds finish_bound_{0};
};

}  // namespace mlrun::fake
