// The per-node agent: runs one node's worker group on an event loop. Exits are seen the moment
// they happen (SIGCHLD on the loop), output is routed line by line, signals to the launcher are
// forwarded, and the Supervisor decides everything else.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "worker/lifeline.h"
#include "worker/output.h"
#include "worker/signals.h"
#include "worker/supervisor.h"

namespace boost::asio {
class io_context;
}

namespace mlrun {

/// Where a worker's two streams go, chosen by the launcher per attempt and worker.
struct WorkerRoutes {
  StreamRoute out;
  StreamRoute err;
};

struct AgentCallbacks {
  /// Routes for a worker that is about to start.
  std::function<WorkerRoutes(int attempt, const WorkerSpec&)> routes;
  /// The first failure of an attempt, before the teardown of the others, with the last lines
  /// of its stderr.
  std::function<void(const WorkerState&, const std::deque<std::string>& stderr_tail)>
      on_first_failure;
  /// With SupervisorConfig::settled_elsewhere: this node's group of an attempt ended.
  std::function<void(const AttemptResult&, const std::vector<std::deque<std::string>>& tails)>
      on_attempt_ended;
  /// A stop signal (SIGINT, SIGTERM, SIGHUP, ...) reached this launcher; called on the loop right
  /// after the workers were passed it.
  std::function<void(int sig)> on_signal;
  /// A forwarded signal (SIGUSR1, SIGUSR2) reached this launcher and was passed to this node's
  /// workers; called on the loop (a head passes it on to the other nodes here).
  std::function<void(int sig)> on_forwarded_signal;
  /// An attempt ended. stderr_tails[i] are the last stderr lines of result.workers[i].
  std::function<void(const AttemptResult&, bool restarting,
                     const std::vector<std::deque<std::string>>& stderr_tails)>
      on_attempt_end;
};

/// Lines of stderr kept per worker for the failure summary.
inline constexpr std::size_t kSummaryTailLines = 10;

class Agent {
 public:
  /// io is the loop to run on; it may carry other work (an embedded rendezvous server).
  /// signals: which signals to this process stop the job and which are passed to the workers.
  Agent(boost::asio::io_context& io, ProcessSpawner& spawner, Lifeline& lifeline,
        Supervisor::Planner planner, SupervisorConfig config, AgentCallbacks callbacks,
        SignalPolicy signals = {});
  ~Agent();

  /// Runs the group to the end and returns the exit code (see Supervisor::exit_code). With
  /// settled_elsewhere, nothing starts until a posted begin_attempt.
  int run();

  /// Runs fn on the loop's thread with the supervisor, then ends the loop if the job is over.
  /// Safe to call from any thread.
  void post(std::function<void(Supervisor&)> fn);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mlrun
