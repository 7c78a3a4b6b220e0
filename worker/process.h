// The operating-system boundary for worker processes: starting one in its own process group and
// signalling groups. Scheduling and teardown logic talk to ProcessSpawner, so they are tested
// with a fake and never fork in unit tests.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace mlrun {

/// What to start. argv[0] must already be a resolved path (see resolve_program); env is the
/// complete environment as "NAME=value" strings.
struct SpawnRequest {
  std::vector<std::string> argv;
  std::vector<std::string> env;
  std::string cwd;  ///< Empty: inherit the launcher's.
  /// The child's stdin: -1 reads /dev/null, else this descriptor of the caller's (duplicated in
  /// the child, left open here). Agent replaces a terminal with a pipe it feeds (worker/stdin.h).
  int stdin_fd = -1;
  /// The signal the child gets when the spawning thread ends (PR_SET_PDEATHSIG). SIGTERM for
  /// srun, which turns it into the end of its step; SIGKILL would leave the step running.
  int death_signal = SIGKILL;
  /// NUMA binding (worker/numa.h), applied in the child before exec: its CPU affinity, and the
  /// NUMA nodes its memory is preferably allocated on. Empty: inherited.
  std::vector<int> cpus;
  std::vector<int> mem_nodes;
};

/// A started process. stdout_fd and stderr_fd are the read ends of its output pipes,
/// non-blocking and close-on-exec; the caller owns them.
struct SpawnedProcess {
  pid_t pid = -1;
  int stdout_fd = -1;
  int stderr_fd = -1;
};

/// A process could not be started; what() names the program and the cause.
class SpawnError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class ProcessSpawner {
 public:
  virtual ~ProcessSpawner() = default;
  /// Starts a process that leads its own process group, dies with this thread's process
  /// (PR_SET_PDEATHSIG, request.death_signal), reads request.stdin_fd (/dev/null by default) and
  /// writes into two fresh pipes. Throws SpawnError.
  virtual SpawnedProcess spawn(const SpawnRequest& request) = 0;
  /// Sends sig to every process of the group led by pgid. A group that is gone is not an error.
  virtual void signal_group(pid_t pgid, int sig) = 0;
  /// Sends sig to the process pid alone (a forwarded SIGUSR1 must not reach a worker's data
  /// loader processes, whose default action for it is to die). A process that is gone is not an
  /// error.
  virtual void signal_process(pid_t pid, int sig) = 0;
  /// Every worker of an attempt has ended: ends whatever they left that escaped their process
  /// groups (setsid daemons, double forks), bounded, before another attempt starts. Without a
  /// job cgroup (worker/cgroup.h) there is nothing more to reach: it does nothing.
  virtual void sweep() {}
};

class JobCgroup;

/// The real spawner (fork + execve). Spawn only from a thread that lives as long as the
/// workers: the kernel's parent-death signal fires when the spawning *thread* exits. With a
/// cgroup (which must outlive the spawner), every child joins it before exec and sweep() kills
/// what is left in it.
std::unique_ptr<ProcessSpawner> make_posix_spawner(JobCgroup* cgroup = nullptr);

/// Closes every descriptor from `first` up (close_range, or one by one on kernels before 5.9).
/// Async-signal-safe: for a child between fork and exec, so that it starts with nothing of ours.
void close_descriptors_from(int first);

/// Finds program the way execvp would (a name with a slash is taken as a path). Throws
/// SpawnError naming the program when it is missing, not a regular file or not executable.
std::string resolve_program(const std::string& program, const std::string& path_env);

/// A short command run to completion or to a deadline, its output captured (64 KiB of each
/// stream at most).
struct BoundedRun {
  std::string error;  ///< Non-empty: it could not start.
  bool timed_out = false;
  int status = 0;  ///< waitpid's.
  std::string out, err;
};

/// A short command started now and awaited later (run_bounded in two steps, so the caller can
/// do other work meanwhile): argv (argv[0] resolved) in its own process group with this
/// process's environment, with timeout_seconds from its start. Destroyed before wait(), it
/// SIGKILLs the group and reaps the command.
class BoundedChild {
 public:
  BoundedChild(const std::vector<std::string>& argv, double timeout_seconds);
  ~BoundedChild();
  BoundedChild(const BoundedChild&) = delete;
  BoundedChild& operator=(const BoundedChild&) = delete;
  /// Its pid; 0 when it could not start.
  pid_t pid() const { return error_.empty() ? process_.pid : 0; }
  /// Its output and exit, up to the deadline (then SIGKILL of its group). Call once.
  BoundedRun wait();

 private:
  void read_output(BoundedRun& r);
  std::unique_ptr<ProcessSpawner> spawner_;
  std::chrono::steady_clock::time_point deadline_;
  SpawnedProcess process_;
  std::string error_;
  bool done_ = false;
};

/// Runs argv (argv[0] resolved) in its own process group with this process's environment, up to
/// timeout_seconds; then SIGKILLs its group. *running, when given, holds its pid while it runs
/// (for a lifeline that must kill it on the way out).
BoundedRun run_bounded(const std::vector<std::string>& argv, double timeout_seconds,
                       std::atomic<pid_t>* running = nullptr);

}  // namespace mlrun
