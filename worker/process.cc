#include "worker/process.h"

#include <fcntl.h>
#include <linux/mempolicy.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "worker/cgroup.h"
#include "worker/env.h"

namespace mlrun {
namespace {

struct Pipe {
  int read = -1;
  int write = -1;
};

Pipe make_pipe() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    throw SpawnError(fmt::format("cannot create a pipe: {}", std::strerror(errno)));
  }
  return {fds[0], fds[1]};
}

std::vector<char*> to_c_array(const std::vector<std::string>& strings) {
  std::vector<char*> out;
  out.reserve(strings.size() + 1);
  for (const auto& s : strings) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

// A NUMA binding in the form the child's system calls take, prepared before fork.
struct Placement {
  bool cpus = false;
  cpu_set_t cpu_set;
  int mode = MPOL_DEFAULT;  // MPOL_PREFERRED (one node) or MPOL_PREFERRED_MANY (several).
  unsigned long nodes[16] = {};
  unsigned long first_node[16] = {};  // For kernels before 5.15 (no MPOL_PREFERRED_MANY).
  unsigned long max_node = 0;
};

Placement make_placement(const SpawnRequest& r) {
  Placement p;
  CPU_ZERO(&p.cpu_set);
  for (int c : r.cpus) {
    if (c < 0 || c >= CPU_SETSIZE) throw SpawnError(fmt::format("CPU {} is out of range", c));
    CPU_SET(c, &p.cpu_set);
    p.cpus = true;
  }
  constexpr unsigned long kBits = sizeof(unsigned long) * 8;
  for (int n : r.mem_nodes) {
    if (n < 0 || static_cast<unsigned long>(n) >= kBits * 16) {
      throw SpawnError(fmt::format("NUMA node {} is out of range", n));
    }
    p.nodes[n / kBits] |= 1ul << (n % kBits);
    p.max_node = std::max<unsigned long>(p.max_node, n + 2);
  }
  if (!r.mem_nodes.empty()) {
    int first = r.mem_nodes.front();
    p.first_node[first / kBits] = 1ul << (first % kBits);
    p.mode = r.mem_nodes.size() == 1 ? MPOL_PREFERRED : MPOL_PREFERRED_MANY;
  }
  return p;
}

// clone3's arguments up to `cgroup` (CLONE_ARGS_SIZE_VER2), declared here: <linux/sched.h>
// clashes with glibc's <sched.h>.
struct CloneArgs {
  std::uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls, set_tid,
      set_tid_size, cgroup;
};
constexpr std::uint64_t kCloneIntoCgroup = 0x200000000ULL;

// fork(), the child born in the cgroup whose directory is dir_fd (Linux 5.7): no migration
// afterwards, whose lock costs each worker milliseconds (6.5 ms measured here) and serialises
// the next fork behind it. -1 with errno when the kernel (or a seccomp filter) refuses; the
// caller then forks and the child joins by writing cgroup.procs. Like fork, the child runs only
// async-signal-safe code before exec.
[[maybe_unused]] pid_t fork_into_cgroup(int dir_fd) {
#ifdef SYS_clone3
  CloneArgs args{};
  args.flags = kCloneIntoCgroup;
  args.exit_signal = SIGCHLD;
  args.cgroup = static_cast<std::uint64_t>(dir_fd);
  return static_cast<pid_t>(syscall(SYS_clone3, &args, sizeof args));
#else
  (void)dir_fd;
  errno = ENOSYS;
  return -1;
#endif
}

// strerror may translate, and so lock and allocate: not for a child between fork and exec.
const char* child_strerror(int e) {
  const char* text = strerrordesc_np(e);
  return text != nullptr ? text : "unknown error";
}

[[noreturn]] void fail_child(const char* prefix, const char* what, int e) {
  (void)!write(STDERR_FILENO, prefix, strlen(prefix));
  (void)!write(STDERR_FILENO, what, strlen(what));
  const char* reason = child_strerror(e);
  (void)!write(STDERR_FILENO, reason, strlen(reason));
  (void)!write(STDERR_FILENO, "\n", 1);
  _exit(127);
}

// Preferred, not bound: a node whose memory is full spills over instead of failing the worker.
void apply_placement(const Placement& p, const char* prefix) {
  if (p.cpus && sched_setaffinity(0, sizeof p.cpu_set, &p.cpu_set) != 0) {
    fail_child(prefix, " (NUMA binding, sched_setaffinity): ", errno);
  }
  if (p.mode == MPOL_DEFAULT) return;
  if (syscall(SYS_set_mempolicy, p.mode, p.nodes, p.max_node) == 0) return;
  if (p.mode == MPOL_PREFERRED_MANY && errno == EINVAL &&
      syscall(SYS_set_mempolicy, MPOL_PREFERRED, p.first_node, p.max_node) == 0) {
    return;
  }
  fail_child(prefix, " (NUMA binding, set_mempolicy): ", errno);
}

// Everything the child runs between fork and exec is async-signal-safe: it may be a copy of a
// multi-threaded process holding locks.
[[noreturn]] void exec_child(pid_t parent, const Pipe& out, const Pipe& err, int stdin_fd,
                             int death_signal, const char* cwd, char* const* argv,
                             char* const* envp, const char* failure_prefix,
                             const Placement& placement, int cgroup_procs_fd) {
  // Into the job's cgroup first (unless clone3 put it there at birth), before anything can fork:
  // whatever this process starts is then the cgroup's too, and cgroup.kill reaches it whichever
  // session or group it moves to.
  if (cgroup_procs_fd >= 0 && write(cgroup_procs_fd, "0", 1) != 1) {
    int e = errno;
    dup2(err.write, STDERR_FILENO);
    fail_child(failure_prefix, " (joining the job's cgroup; MLRUN_CGROUP=off turns it off): ", e);
  }
  setpgid(0, 0);
  // Die with the launcher; if it already died between fork and here, the signal will never
  // come, so check the parent afterwards.
  prctl(PR_SET_PDEATHSIG, death_signal);
  if (getppid() != parent) _exit(127);
  // dup2 onto itself (stdin_fd 0) changes nothing, so clear close-on-exec by hand.
  if (stdin_fd == STDIN_FILENO) {
    fcntl(STDIN_FILENO, F_SETFD, 0);
  } else {
    dup2(stdin_fd, STDIN_FILENO);
  }
  dup2(out.write, STDOUT_FILENO);
  dup2(err.write, STDERR_FILENO);
  close_descriptors_from(3);
  // The launcher ignores SIGPIPE and handles others; a fresh program expects defaults.
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) signal(sig, SIG_DFL);
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  apply_placement(placement, failure_prefix);
  if (cwd != nullptr && chdir(cwd) != 0) {
    int e = errno;
    (void)!write(STDERR_FILENO, failure_prefix, strlen(failure_prefix));
    const char* what = " (changing directory): ";
    (void)!write(STDERR_FILENO, what, strlen(what));
    const char* reason = child_strerror(e);
    (void)!write(STDERR_FILENO, reason, strlen(reason));
    (void)!write(STDERR_FILENO, "\n", 1);
    _exit(127);
  }
  execve(argv[0], argv, envp);
  int e = errno;
  (void)!write(STDERR_FILENO, failure_prefix, strlen(failure_prefix));
  (void)!write(STDERR_FILENO, ": ", 2);
  const char* reason = child_strerror(e);
  (void)!write(STDERR_FILENO, reason, strlen(reason));
  (void)!write(STDERR_FILENO, "\n", 1);
  _exit(127);
}

// exec_child's arguments, for a child started on a stack of its own.
struct ChildStart {
  pid_t parent;
  const Pipe* out;
  const Pipe* err;
  int stdin_fd;
  int death_signal;
  const char* cwd;
  char* const* argv;
  char* const* envp;
  const char* failure_prefix;
  const Placement* placement;
};

// A worker started the way posix_spawn starts one, sharing this process's memory until its exec
// (CLONE_VM | CLONE_VFORK), and born in the cgroup dir_fd (>= 0) as fork_into_cgroup's child is.
// fork copies this process's page tables and makes every page it writes afterwards fault: on a
// virtual machine whose page faults are dear that was most of a worker's cost (bench/README.md,
// "Spawning a worker and starting mlrun"). The child runs on its own stack, in this frame's, while
// this thread waits for its exec; it touches nothing of this process but through system calls.
// x86-64 only (the child's entry is a few instructions of assembly), and not under ASan or TSan,
// whose runtimes would see a second thread on this one's state: elsewhere -1 with errno ENOSYS, as
// where the kernel or a seccomp filter refuses clone3, and the caller forks.
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define MLRUN_SPAWN_SHARED_VM 1
[[noreturn]] void child_entry(ChildStart* c) {
  exec_child(c->parent, *c->out, *c->err, c->stdin_fd, c->death_signal, c->cwd, c->argv, c->envp,
             c->failure_prefix, *c->placement, -1);
}

pid_t spawn_shared_vm(int dir_fd, ChildStart& start) {
  constexpr std::uint64_t kCloneVm = 0x100, kCloneVfork = 0x4000;
  alignas(64) unsigned char stack[32 * 1024];
  CloneArgs args{};
  args.flags = kCloneVm | kCloneVfork | (dir_fd >= 0 ? kCloneIntoCgroup : 0);
  args.exit_signal = SIGCHLD;
  args.stack = reinterpret_cast<std::uint64_t>(stack);
  args.stack_size = sizeof stack;
  args.cgroup = dir_fd >= 0 ? static_cast<std::uint64_t>(dir_fd) : 0;
  void (*entry)(ChildStart*) = child_entry;
  ChildStart* arg = &start;
  long ret;
  // The child starts after the syscall with rax 0 and its stack pointer at the top of `stack`
  // (16-byte aligned; the call leaves it as a function's entry expects) and every other register
  // as this thread had it: it calls entry(arg), which never returns. rcx and r11 are the
  // syscall's; entry and arg are in neither.
  asm volatile(
      "syscall\n\t"
      "test %%rax, %%rax\n\t"
      "jnz 1f\n\t"
      "xor %%ebp, %%ebp\n\t"
      "mov %[arg], %%rdi\n\t"
      "call *%[entry]\n\t"
      "ud2\n"
      "1:"
      : "=a"(ret)
      : "0"(static_cast<long>(SYS_clone3)), "D"(&args),
        "S"(sizeof args), [entry] "r"(entry), [arg] "r"(arg)
      : "rcx", "r11", "memory");
  if (ret < 0) {
    errno = static_cast<int>(-ret);
    return -1;
  }
  return static_cast<pid_t>(ret);
}
#endif

class PosixSpawner final : public ProcessSpawner {
 public:
  explicit PosixSpawner(JobCgroup* cgroup)
      : devnull_(open("/dev/null", O_RDONLY | O_CLOEXEC)), cgroup_(cgroup) {
    if (devnull_ < 0) throw SpawnError("cannot open /dev/null");
  }
  ~PosixSpawner() override { close(devnull_); }

  SpawnedProcess spawn(const SpawnRequest& request) override {
    if (request.argv.empty()) throw SpawnError("empty command");
    auto argv = to_c_array(request.argv);
    auto envp = to_c_array(request.env);
    std::string failure_prefix = fmt::format("mlrun: cannot execute {}", request.argv[0]);
    const Placement placement = make_placement(request);
    std::string cgroup_error;
    if (cgroup_ != nullptr && !cgroup_->open_attempt(&cgroup_error)) {
      throw SpawnError(
          fmt::format("cannot start {}: {} (MLRUN_CGROUP=off turns the job's cgroup off)",
                      request.argv[0], cgroup_error));
    }
    Pipe out = make_pipe();
    Pipe err;
    try {
      err = make_pipe();
    } catch (...) {
      close(out.read);
      close(out.write);
      throw;
    }
    // Block every signal across fork so that no handler of the launcher runs in the child
    // before it has reset them; the child unblocks after the reset.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pid_t parent = getpid();
    const int stdin_fd = request.stdin_fd >= 0 ? request.stdin_fd : devnull_;
    const char* cwd = request.cwd.empty() ? nullptr : request.cwd.c_str();
    pid_t pid = -1;
#ifdef MLRUN_SPAWN_SHARED_VM
    ChildStart start{parent,
                     &out,
                     &err,
                     stdin_fd,
                     request.death_signal,
                     cwd,
                     argv.data(),
                     envp.data(),
                     failure_prefix.c_str(),
                     &placement};
    pid = spawn_shared_vm(cgroup_ != nullptr ? cgroup_->dir_fd() : -1, start);
#endif
    // Else a fork: into the attempt's cgroup at birth where the kernel can, else by the child's
    // own write. Not the raw clone3 under TSan: its fork() interceptor takes the runtime's locks
    // first, and a raw clone's child could inherit one held by another thread and hang in the
    // first intercepted call (launcher/fake_transport.cc's middle did).
    int join_fd = -1;
#ifndef __SANITIZE_THREAD__
    if (pid < 0 && cgroup_ != nullptr) pid = fork_into_cgroup(cgroup_->dir_fd());
#endif
    if (pid < 0) {
      if (cgroup_ != nullptr) join_fd = cgroup_->procs_fd();
      pid = fork();
    }
    if (pid == 0) {
      exec_child(parent, out, err, stdin_fd, request.death_signal, cwd, argv.data(), envp.data(),
                 failure_prefix.c_str(), placement, join_fd);
    }
    int fork_errno = errno;
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    close(out.write);
    close(err.write);
    if (pid < 0) {
      close(out.read);
      close(err.read);
      throw SpawnError(
          fmt::format("cannot start {}: fork: {}", request.argv[0], std::strerror(fork_errno)));
    }
    // Also from the parent, so that a signal sent to the group right after spawn() returns
    // cannot miss a child that has not run yet. EACCES after the child's exec is harmless.
    setpgid(pid, pid);
    fcntl(out.read, F_SETFL, O_NONBLOCK);
    fcntl(err.read, F_SETFL, O_NONBLOCK);
    return {pid, out.read, err.read};
  }

  void signal_group(pid_t pgid, int sig) override {
    if (pgid > 0) killpg(pgid, sig);
  }

  void signal_process(pid_t pid, int sig) override {
    if (pid > 0) kill(pid, sig);
  }

  void sweep() override {
    if (cgroup_ != nullptr) cgroup_->kill_all();
  }

 private:
  int devnull_;
  JobCgroup* cgroup_;
};

bool is_executable_file(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

}  // namespace

std::unique_ptr<ProcessSpawner> make_posix_spawner(JobCgroup* cgroup) {
  return std::make_unique<PosixSpawner>(cgroup);
}

std::string resolve_program(const std::string& program, const std::string& path_env) {
  if (program.empty()) throw SpawnError("empty program name");
  if (program.find('/') != std::string::npos) {
    struct stat st;
    if (stat(program.c_str(), &st) != 0) {
      throw SpawnError(fmt::format("{}: {}", program, std::strerror(errno)));
    }
    if (!S_ISREG(st.st_mode)) throw SpawnError(fmt::format("{}: not a regular file", program));
    if (access(program.c_str(), X_OK) != 0) {
      throw SpawnError(
          fmt::format("{}: not executable (chmod +x, or name an interpreter)", program));
    }
    return program;
  }
  std::string_view rest = path_env;
  while (true) {
    auto colon = rest.find(':');
    std::string_view dir = rest.substr(0, colon);
    std::string candidate = fmt::format("{}/{}", dir.empty() ? "." : dir, program);
    if (is_executable_file(candidate)) return candidate;
    if (colon == std::string_view::npos) break;
    rest.remove_prefix(colon + 1);
  }
  throw SpawnError(fmt::format("{}: command not found in PATH", program));
}

BoundedChild::BoundedChild(const std::vector<std::string>& argv, double timeout_seconds)
    : spawner_(make_posix_spawner()),
      deadline_(std::chrono::steady_clock::now() +
                std::chrono::milliseconds(static_cast<long>(timeout_seconds * 1000))) {
  try {
    process_ = spawner_->spawn(SpawnRequest{argv, Environment::current().entries(), {}});
  } catch (const SpawnError& e) {
    error_ = e.what();
    done_ = true;
  }
}

BoundedChild::~BoundedChild() {
  if (done_) return;
  spawner_->signal_group(process_.pid, SIGKILL);
  for (int fd : {process_.stdout_fd, process_.stderr_fd}) {
    if (fd >= 0) close(fd);
  }
  while (waitpid(process_.pid, nullptr, 0) < 0 && errno == EINTR) {
  }
}

// Both streams until their end or the deadline (then timed_out).
void BoundedChild::read_output(BoundedRun& r) {
  pollfd fds[2] = {{process_.stdout_fd, POLLIN, 0}, {process_.stderr_fd, POLLIN, 0}};
  std::string* sinks[2] = {&r.out, &r.err};
  int open_fds = 2;
  while (open_fds > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline_ - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      r.timed_out = true;
      break;
    }
    int n = poll(fds, 2, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;  // Not expected; the exit is still awaited under the deadline below.
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[4096];
      ssize_t got = read(fds[i].fd, buf, sizeof buf);
      if (got > 0) {
        // A probe prints a line or two; a runaway one is cut, not buffered without bound.
        if (sinks[i]->size() < 64 * 1024) sinks[i]->append(buf, static_cast<std::size_t>(got));
      } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (auto& f : fds) {
    if (f.fd >= 0) close(f.fd);
  }
  process_.stdout_fd = process_.stderr_fd = -1;
}

BoundedRun BoundedChild::wait() {
  BoundedRun r;
  if (done_) {
    r.error = error_;
    return r;
  }
  done_ = true;
  read_output(r);
  // The exit is awaited under the same deadline: a probe that closed its output may still hang.
  // Its end of output is normally its exit an instant before: look again soon, then less often.
  // Seen, not reaped (WNOWAIT), until its group is killed below: a reaped pid could by then lead
  // another process's group.
  auto pause = std::chrono::microseconds(100);
  while (!r.timed_out) {
    siginfo_t info{};
    int seen = waitid(P_PID, static_cast<id_t>(process_.pid), &info, WEXITED | WNOHANG | WNOWAIT);
    if ((seen == 0 && info.si_pid == process_.pid) || (seen < 0 && errno != EINTR)) break;
    if (std::chrono::steady_clock::now() >= deadline_) {
      r.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(5));
  }
  // Whatever the probe left behind in its group goes too (and the probe, when it timed out).
  spawner_->signal_group(process_.pid, SIGKILL);
  while (waitpid(process_.pid, &r.status, 0) < 0 && errno == EINTR) {
  }
  return r;
}

BoundedRun run_bounded(const std::vector<std::string>& argv, double timeout_seconds,
                       std::atomic<pid_t>* running) {
  BoundedChild child(argv, timeout_seconds);
  if (running != nullptr) *running = child.pid();
  BoundedRun r = child.wait();
  if (running != nullptr) *running = 0;
  return r;
}

}  // namespace mlrun
