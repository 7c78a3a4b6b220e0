// A backstop for the case no handler can cover: the launcher SIGKILLed. PR_SET_PDEATHSIG kills
// each worker, but not the children a worker started. The lifeline is a small process started
// at start-up (a head: the mlrun-lifeline program where it is installed, else a fork of the
// launcher; an agent: a fork, first thing, which is cheaper while it is small) that holds the read
// end of a pipe; the launcher writes the process groups it starts and ends into it, and when the
// pipe reports end-of-file (the launcher is gone, however it died) the lifeline SIGKILLs every
// group still listed, kills and removes the job's cgroup it was given (what left the groups),
// removes the directory it was given, then exits.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <string>

namespace mlrun {

class Lifeline {
 public:
  /// Starts the lifeline process: the mlrun-lifeline program beside this executable or in its
  /// libexec/mlrun directory, by posix_spawn; else a fork that does not exec (so call it before
  /// any thread is started). On failure the lifeline is inactive and track/untrack do nothing.
  ///
  /// watch_fd >= 0 (an agent's stdin, the head's SSH channel): when its other end closes (the
  /// head is gone or gave up on this node) and the launcher has not ended `bound` later (it
  /// hangs: SIGSTOP, D state, so it cannot stop its workers itself), the lifeline SIGKILLs the
  /// launcher and then sweeps as when it is gone.
  static Lifeline start(int watch_fd = -1,
                        std::chrono::milliseconds bound = std::chrono::milliseconds(0));
  /// The same, always as a fork that does not exec: for a process that has just started (an
  /// agent, before it reads its job), whose few pages make the fork cheaper than the program's
  /// exec and start-up (docs/launcher.md, "Start-up"). Call it before any thread is started.
  static Lifeline fork_now(int watch_fd = -1,
                           std::chrono::milliseconds bound = std::chrono::milliseconds(0));
  Lifeline() = default;
  Lifeline(Lifeline&& other) noexcept : fd_(other.fd_), pid_(other.pid_) { other.fd_ = -1; }
  Lifeline& operator=(Lifeline&& other) noexcept;
  ~Lifeline();

  /// A new bound for the watched descriptor (start's `bound`), for a launcher that learns it
  /// after its lifeline started; a countdown already running moves by the difference.
  void set_bound(std::chrono::milliseconds bound);
  void track(pid_t pgid);
  void untrack(pid_t pgid);
  /// The directory the lifeline removes, with everything in it, when the launcher is gone
  /// (its run directory on /dev/shm); an empty path forgets it.
  void remove_on_exit(const std::string& dir);
  /// The node's job cgroup (worker/cgroup.h), killed and removed when the launcher is gone; an
  /// empty path forgets it.
  void kill_cgroup_on_exit(const std::string& dir);
  bool active() const { return fd_ >= 0; }
  pid_t pid() const { return pid_; }

 private:
  static Lifeline begin(int watch_fd, std::chrono::milliseconds bound, bool program_first);
  void send_path(char op, const std::string& path);
  int fd_ = -1;
  pid_t pid_ = -1;
};

/// The lifeline's own loop, in the forked child or in mlrun-lifeline (worker/lifeline_program.cc):
/// reads the launcher's pipe fd until it ends (watch >= 0: or until watch's other end has been
/// closed for bound_ms, when it SIGKILLs launcher first), then sweeps what is still listed.
[[noreturn]] void lifeline_main(int fd, int watch, long bound_ms, pid_t launcher);

}  // namespace mlrun
