// The local worker group's state machine: start every worker, notice the first failure, stop
// the rest (SIGTERM to each process group, a grace period, SIGKILL), restart the group when
// restarts remain, and settle the exit code. It performs no I/O of its own: processes go
// through ProcessSpawner and time through SupervisorHooks, so unit tests drive it with fakes.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "worker/process.h"

namespace mlrun {

using WallTime = std::chrono::system_clock::time_point;

/// One worker of one attempt.
struct WorkerSpec {
  int rank = 0;
  int local_rank = 0;
  SpawnRequest request;
};

/// How a worker ended.
enum class WorkerEnd {
  kRunning,    ///< Not ended yet.
  kSucceeded,  ///< Exit status 0.
  kFailed,     ///< Non-zero exit or a signal nobody in mlrun sent.
  kStopped,    ///< Ended after mlrun signalled it (teardown or a forwarded signal).
};

struct WorkerState {
  WorkerSpec spec;
  pid_t pid = -1;
  WorkerEnd end = WorkerEnd::kRunning;
  int wait_status = 0;         ///< As from waitpid; valid once ended.
  WallTime ended_at;           ///< Valid once ended.
  std::string spawn_error;     ///< Set when the worker could not be started at all.
  bool signalled = false;      ///< mlrun sent its group a signal before it ended.
};

/// Exit code convention of shells: the code, or 128+N for signal N.
int exit_code_from_status(int wait_status);
/// "exit code 3" or "signal SIGSEGV (11)".
std::string describe_status(int wait_status);

struct SupervisorConfig {
  int max_restarts = 0;
  std::chrono::milliseconds grace_period{5000};
  /// Multi-node: whether an ended attempt failed is decided across nodes. The supervisor then
  /// reports the local result (SupervisorHooks::on_attempt_ended) and waits for settle(), and
  /// attempts begin with begin_attempt() instead of the planner.
  bool settled_elsewhere = false;
};

/// One attempt's outcome, handed to the hooks when its last worker has ended.
struct AttemptResult {
  int attempt = 0;
  std::vector<WorkerState> workers;
  std::optional<std::size_t> first_failure;  ///< Index into workers.
  int interrupt_signal = 0;                  ///< Non-zero when a signal to mlrun ended it.
  bool remote_failure = false;               ///< Stopped because a worker elsewhere failed.
  std::string plan_error;                    ///< The planner failed: no worker was started.
  bool failed() const { return first_failure || remote_failure || !plan_error.empty(); }
};

class SupervisorHooks {
 public:
  virtual ~SupervisorHooks() = default;
  /// A worker was started; wire up its output.
  virtual void on_spawned(const WorkerState& worker, const SpawnedProcess& process) = 0;
  /// The first failure of an attempt was seen; teardown of the rest begins now.
  virtual void on_first_failure(const WorkerState& worker) = 0;
  /// An attempt ended; restarting says whether another one starts right after.
  virtual void on_attempt_end(const AttemptResult& result, bool restarting) = 0;
  /// With settled_elsewhere: the local group of an attempt ended; settle() follows.
  virtual void on_attempt_ended(const AttemptResult& result) {}
  /// Calls Supervisor::on_grace_expired after delay, replacing an armed timer.
  virtual void arm_timer(std::chrono::milliseconds delay) = 0;
  virtual void cancel_timer() = 0;
  virtual WallTime now() = 0;
};

class Supervisor {
 public:
  /// Returns the workers of attempt n (0 first); called once per attempt so that each one gets
  /// its own restart count, ports and log files. It may block (a multi-node rendezvous) and
  /// may throw std::exception: the job then ends with exit code 1 and the error in the result.
  using Planner = std::function<std::vector<WorkerSpec>(int attempt)>;

  Supervisor(ProcessSpawner& spawner, SupervisorHooks& hooks, Planner planner,
             SupervisorConfig config);

  /// Starts attempt 0 from the planner (not with settled_elsewhere).
  void start();
  /// With settled_elsewhere: starts attempt `attempt` with these workers.
  void begin_attempt(int attempt, std::vector<WorkerSpec> specs);
  /// With settled_elsewhere: the job-wide verdict on the attempt that ended. failed: restart
  /// if restarts remain, else finish with exit_code.
  void settle(bool failed, int exit_code);
  /// Ends the job (a job-wide abort, a lost rendezvous): stop every worker, finish with
  /// exit_code, no restart.
  void abort(int exit_code);
  /// A child ended (from waitpid). Unknown pids are ignored.
  void on_exit(pid_t pid, int wait_status);
  /// SIGINT, SIGTERM or SIGHUP reached the launcher: forward it, no restarts after. A second
  /// SIGINT kills every group at once.
  void on_signal(int sig);
  /// A signal the job goes on after (SIGUSR1, SIGUSR2) reached this node: passes it to every
  /// running worker process (not its group). A worker it kills (no handler) has failed: nothing
  /// in mlrun asked it to stop. Returns how many workers it was sent to.
  int forward_signal(int sig);
  /// Sends sig to every running worker's process group (job control: SIGTSTP, SIGCONT), so that
  /// its children stop and go on with it. Returns how many were signalled.
  int signal_groups(int sig);
  /// The grace period after a stop request ran out: SIGKILL what is left.
  void on_grace_expired();
  /// A worker on another node failed: stop this node's workers as for a local failure (they
  /// end as stopped) and restart with the others if restarts remain. exit_code is the job's
  /// (the remote worker's) code, used when no restart follows.
  void on_remote_failure(int exit_code);

  bool finished() const { return finished_; }
  /// Valid once finished: 0, the first failed worker's code, or 128+N after signal N.
  int exit_code() const { return exit_code_; }
  int attempt() const { return attempt_; }
  const std::vector<WorkerState>& workers() const { return workers_; }
  std::size_t running() const { return running_; }
  /// The first stop signal received (on_signal), or 0.
  int interrupt_signal() const { return interrupt_signal_; }

 private:
  void start_attempt();
  void spawn_all();
  void stop_all(int sig);
  int signal_running(int sig, bool groups);  // each running worker, or its group
  void end_attempt();
  void finish(bool failed, int failed_code);

  ProcessSpawner& spawner_;
  SupervisorHooks& hooks_;
  Planner planner_;
  SupervisorConfig config_;
  int attempt_ = 0;
  std::vector<WorkerState> workers_;
  std::size_t running_ = 0;
  std::optional<std::size_t> first_failure_;
  int interrupt_signal_ = 0;
  WallTime interrupted_at_;
  bool remote_failure_ = false;
  int remote_exit_code_ = 1;
  std::string plan_error_;
  int abort_code_ = -1;
  bool settling_ = false;
  std::optional<AttemptResult> ended_;
  bool stopping_ = false;
  bool finished_ = false;
  int exit_code_ = 0;
};

}  // namespace mlrun
