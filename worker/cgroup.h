// Teardown that reaches every process a node's workers started, daemons included: one cgroup v2
// per node of the job, which each worker joins between fork and exec, and whose `cgroup.kill`
// ends whatever is left when an attempt ends. Where the machine allows none (no cgroup2 mount,
// no write access to a child of our own cgroup, a kernel before 5.14, MLRUN_CGROUP=off),
// teardown is the process groups' alone, and the reason is said (docs/launcher.md, Teardown).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

namespace mlrun {

class Lifeline;

/// The mount point of the cgroup2 file system in a /proc/self/mountinfo text, and its root (the
/// 4th field: "/" unless the mount shows a subtree). nullopt when none is mounted.
struct Cgroup2Mount {
  std::string mount_point;
  std::string root;
};
std::optional<Cgroup2Mount> parse_cgroup2_mount(std::string_view mountinfo);

/// Our cgroup v2 path from a /proc/self/cgroup text (its "0::PATH" line). nullopt without one.
std::optional<std::string> parse_own_cgroup(std::string_view proc_self_cgroup);

/// The directory of the cgroup at path (as /proc/self/cgroup names it) under a mount; empty when
/// path lies outside what the mount shows.
std::string cgroup_directory(const Cgroup2Mount& mount, const std::string& path);

/// A name made of a job id that is safe as one path component: [A-Za-z0-9._-] kept, anything
/// else '_', at most 64 characters.
std::string cgroup_name_part(std::string_view job_id);

/// How this machine's teardown works for a process: directory set (our own cgroup's, where
/// the job's cgroup is made), or reason set (why only process groups are used).
struct CgroupSupport {
  std::string parent;  ///< Our own cgroup's directory, e.g. /sys/fs/cgroup/user.slice/...
  std::string reason;  ///< Set when cgroups cannot be used.
  /// "cgroup v2 at PARENT" or "process groups: REASON", as --dry-run and doctor print it.
  std::string describe() const;
};

/// Finds the cgroup2 mount and our own cgroup, and checks by making (and removing) a child cgroup
/// that one can be made there and has cgroup.kill. MLRUN_CGROUP=off (or 0, no) turns it off.
CgroupSupport probe_cgroup_support();

/// One node's cgroup of a job, made under our own cgroup and removed at the end. Its workers live
/// in a leaf made per attempt (attempt-N), which each worker enters at birth (clone3 into
/// dir_fd) or by writing procs_fd between fork and exec. At the end of an attempt the whole
/// cgroup is killed and the attempt's leaf removed. A fresh leaf per attempt because Linux 6.18
/// SIGKILLs a child cloned into a cgroup that was ever killed.
class JobCgroup {
 public:
  /// Makes <own cgroup>/mlrun-<job>-<pid>. nullptr with *reason set when it cannot.
  static std::unique_ptr<JobCgroup> create(std::string_view job_id, std::string* reason);
  ~JobCgroup();  ///< kill_all, then removes the directory.
  JobCgroup(const JobCgroup&) = delete;
  JobCgroup& operator=(const JobCgroup&) = delete;

  /// Tells the lifeline to kill and remove this cgroup if this process dies without doing it
  /// itself; the destructor takes that back.
  void watch_by(Lifeline& lifeline);

  const std::string& path() const { return path_; }
  /// Makes the current attempt's leaf unless one is open. Returns false with *error set.
  bool open_attempt(std::string* error);
  /// The open leaf's directory (for clone3's CLONE_INTO_CGROUP) and its cgroup.procs (a child
  /// writes "0" to it to join, async-signal-safe); both close-on-exec; -1 when none is open.
  int dir_fd() const { return leaf_dir_fd_; }
  int procs_fd() const { return leaf_procs_fd_; }
  /// Writes "1" to cgroup.kill, waits up to timeout for cgroup.events to say "populated 0", and
  /// removes the attempt's leaf. Returns false (and says so on stderr, with what is left) when
  /// something outlived it.
  bool kill_all(std::chrono::milliseconds timeout = std::chrono::seconds(5));

 private:
  explicit JobCgroup(std::string path) : path_(std::move(path)) {}
  void close_leaf();
  std::string path_;
  int attempts_ = 0;
  std::string leaf_;
  int leaf_dir_fd_ = -1;
  int leaf_procs_fd_ = -1;
  Lifeline* lifeline_ = nullptr;
};

/// A node's cgroup for job_id, watched by the lifeline, or nullptr where the machine allows none
/// (the reason logged at info: `-v` shows it). The teardown mode is logged either way.
std::unique_ptr<JobCgroup> make_node_cgroup(std::string_view job_id, Lifeline& lifeline);

/// Writes "1" to dir/cgroup.kill (the kernel kills the whole subtree, and forks that race with it
/// are killed too) and waits up to timeout for cgroup.events to say the subtree is empty. Returns
/// whether it is (an absent dir holds nothing). worker/cgroup_kill.cc, with the next.
bool kill_cgroup(const std::string& dir, std::chrono::milliseconds timeout);

/// The same teardown for a path, without an object: kills what the cgroup at dir holds (and in
/// cgroups below it), waits up to timeout for them to be gone, and removes dir and its children.
/// For the lifeline, which may run it after the launcher is gone. Returns whether dir is gone.
bool kill_and_remove_cgroup(const std::string& dir, std::chrono::milliseconds timeout);

}  // namespace mlrun
