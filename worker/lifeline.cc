#include "worker/lifeline.h"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

#include "worker/cgroup.h"
#include "worker/process.h"

extern char** environ;

namespace mlrun {
namespace {

// Groups one launcher tracks at once; more than this many local workers is far beyond any node.
constexpr int kMaxTracked = 8192;

// The one directory the launcher asked to have removed (its run directory on /dev/shm), or empty.
char tracked_dir[PATH_MAX];
// The node's job cgroup (worker/cgroup.h) to kill and remove, or empty.
char tracked_cgroup[PATH_MAX];

// The watched descriptor's grace (Lifeline::set_bound), in ms; the "BMS" line changes it.
long watch_bound_ms = 0;

// "XPATH" sets a path, "x" forgets it.
void set_path(char* target, const char* line, std::size_t len, bool set) {
  std::size_t n = set && len - 1 < PATH_MAX ? len - 1 : 0;
  std::memcpy(target, line + 1, n);
  target[n] = '\0';
}

// The decimal number after a line's op character (at most 11 digits); -1 when it is not one.
long number_of(const char* line, std::size_t len) {
  long n = 0;
  for (std::size_t d = 1; d < len && d < 12; ++d) {
    if (line[d] < '0' || line[d] > '9') return -1;
    n = n * 10 + (line[d] - '0');
  }
  return n;
}

// Applies one line of the pipe: "+PGID" / "-PGID" track and forget a process group, "DPATH" /
// "d" a directory, "CPATH" / "c" a cgroup, "BMS" the watched descriptor's bound.
void apply_line(const char* line, std::size_t len, pid_t* tracked, int& count) {
  if (len == 0) return;
  if (line[0] == 'D' || line[0] == 'd') return set_path(tracked_dir, line, len, line[0] == 'D');
  if (line[0] == 'C' || line[0] == 'c') return set_path(tracked_cgroup, line, len, line[0] == 'C');
  const long n = number_of(line, len);
  if (line[0] == 'B') {
    if (n >= 0) watch_bound_ms = n;
    return;
  }
  const pid_t pgid = static_cast<pid_t>(n);
  if (pgid <= 0) return;
  if (line[0] == '+') {
    if (count < kMaxTracked) tracked[count++] = pgid;
  } else if (line[0] == '-') {
    for (int k = 0; k < count; ++k) {
      if (tracked[k] == pgid) {
        tracked[k] = tracked[--count];
        break;
      }
    }
  }
}

// Waits until the launcher's pipe ends; watch >= 0: or until watch's other end has been closed
// for watch_bound_ms, when the launcher is SIGKILLed first.
void wait_for_the_end(int fd, int watch, pid_t launcher, pid_t* tracked, int& count) {
  static char line[PATH_MAX + 2];
  std::size_t len = 0;
  char buf[4096];
  long left_ms = -1;  // Counting down once watch has hung up.
  while (true) {
    pollfd p[2] = {{fd, POLLIN, 0}, {watch, POLLRDHUP, 0}};
    auto before = std::chrono::steady_clock::now();
    int n =
        poll(p, watch >= 0 && left_ms < 0 ? 2 : 1, left_ms < 0 ? -1 : static_cast<int>(left_ms));
    if (n < 0 && errno != EINTR) return;
    if (left_ms >= 0) {
      left_ms -= std::chrono::duration_cast<std::chrono::milliseconds>(
                     std::chrono::steady_clock::now() - before)
                     .count();
      if (left_ms <= 0) {
        kill(launcher, SIGKILL);
        return;
      }
    }
    if (n <= 0) continue;
    if (watch >= 0 && left_ms < 0 && (p[1].revents & (POLLHUP | POLLRDHUP | POLLERR)) != 0) {
      left_ms = std::max(1L, watch_bound_ms);
    }
    if (p[0].revents == 0) continue;
    ssize_t got = read(fd, buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return;
    for (ssize_t i = 0; i < got; ++i) {
      if (buf[i] != '\n') {
        if (len < sizeof line) line[len++] = buf[i];
        continue;
      }
      const long before_ms = watch_bound_ms;
      apply_line(line, len, tracked, count);
      // A new bound while counting down moves the deadline with it.
      if (left_ms >= 0 && watch_bound_ms != before_ms) {
        left_ms = std::max(1L, left_ms + watch_bound_ms - before_ms);
      }
      len = 0;
    }
  }
}

void send(int fd, char op, long number) {
  char line[32];
  int len = std::snprintf(line, sizeof line, "%c%ld\n", op, number);
  // Short writes to a pipe below PIPE_BUF are atomic; a failure means the lifeline is gone and
  // nothing else can be done about it here.
  while (write(fd, line, static_cast<std::size_t>(len)) < 0 && errno == EINTR) {
  }
}

}  // namespace

[[noreturn]] void lifeline_main(int fd, int watch, long bound_ms, pid_t launcher) {
  prctl(PR_SET_NAME, "mlrun-lifeline");
  // Terminal signals are for the launcher, which forwards them; the lifeline only watches.
  signal(SIGINT, SIG_IGN);
  signal(SIGTERM, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  signal(SIGQUIT, SIG_IGN);
  // Started by posix_spawn, they come blocked until ignored (Lifeline::start).
  sigset_t stops;
  sigemptyset(&stops);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&stops, sig);
  sigprocmask(SIG_UNBLOCK, &stops, nullptr);
  // Hold none of the launcher's terminals, pipes or sockets open: whoever reads the launcher's
  // output must see it end when the launcher ends, and no port may stay bound by us.
  // The watched descriptor (the agent's stdin, an SSH channel: input, read by nobody here)
  // is the one exception, kept to see its other end close.
  if (watch >= 0) watch = fcntl(watch, F_DUPFD, 10);
  int devnull = open("/dev/null", O_RDWR);
  for (int i = 0; i < 3; ++i) dup2(devnull, i);
  fd = dup2(fd, 3);
  if (watch >= 0) watch = dup2(watch, 4);
  close_descriptors_from(watch >= 0 ? 5 : 4);
  static pid_t tracked[kMaxTracked];
  int count = 0;
  watch_bound_ms = bound_ms;
  wait_for_the_end(fd, watch, launcher, tracked, count);
  for (int k = 0; k < count; ++k) killpg(tracked[k], SIGKILL);
  // What left the groups (a worker's setsid daemon) is still in the job's cgroup.
  if (tracked_cgroup[0] != '\0') {
    kill_and_remove_cgroup(tracked_cgroup, std::chrono::seconds(5));
  }
  // The launcher's files on a memory file system outlive it otherwise (until reboot).
  if (tracked_dir[0] != '\0') {
    std::error_code ignored;
    std::filesystem::remove_all(tracked_dir, ignored);
  }
  _exit(0);
}

namespace {

// The mlrun-lifeline program (worker/lifeline_program.cc) beside this executable (the build
// tree) or in its libexec directory (an installation, CMakeLists.txt); empty when neither is.
const std::string& lifeline_program() {
  static const std::string path = [] {
    std::error_code ec;
    std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
    if (ec) return std::string();
    for (const auto& candidate :
         {self.parent_path() / "mlrun-lifeline",
          self.parent_path().parent_path() / "libexec" / "mlrun" / "mlrun-lifeline"}) {
      if (access(candidate.c_str(), X_OK) == 0) return candidate.string();
    }
    return std::string();
  }();
  return path;
}

// Starts mlrun-lifeline reading `pipe_read`, as posix_spawn does (a child sharing this
// process's memory until its exec): no copy of the page tables and no copy-on-write faults
// afterwards, which a fork of a grown launcher costs (~7 ms of CPU and ~75 faults on a VM whose
// page faults are dear; docs/launcher.md, "Start-up"). -1 when it cannot be started.
pid_t spawn_lifeline(const std::string& program, int pipe_read, int watch_fd, long bound_ms,
                     pid_t launcher) {
  // Above the descriptors the child's dup2s write, so that none overwrites another's source.
  int pipe_copy = fcntl(pipe_read, F_DUPFD_CLOEXEC, 10);
  int watch_copy = watch_fd >= 0 ? fcntl(watch_fd, F_DUPFD_CLOEXEC, 10) : -1;
  pid_t pid = -1;
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attr);
  if (pipe_copy >= 0 && (watch_fd < 0 || watch_copy >= 0)) {
    // The pipe as 3 and the watched descriptor as 4, where the program looks for them;
    // lifeline_main itself puts /dev/null on 0-2 and closes the rest.
    posix_spawn_file_actions_adddup2(&actions, pipe_copy, 3);
    if (watch_copy >= 0) posix_spawn_file_actions_adddup2(&actions, watch_copy, 4);
    // Its own process group, as the fork's setpgid; the stop signals blocked until it ignores
    // them, every other signal's disposition the default.
    sigset_t mask, defaults;
    sigemptyset(&mask);
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&mask, sig);
    sigfillset(&defaults);
    sigdelset(&defaults, SIGKILL);
    sigdelset(&defaults, SIGSTOP);
    posix_spawnattr_setflags(
        &attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setsigmask(&attr, &mask);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    std::string pid_arg = std::to_string(launcher), bound_arg = std::to_string(bound_ms);
    char* argv[] = {const_cast<char*>("mlrun-lifeline"), pid_arg.data(), bound_arg.data(),
                    const_cast<char*>(watch_copy >= 0 ? "1" : "0"), nullptr};
    if (posix_spawn(&pid, program.c_str(), &actions, &attr, argv, environ) != 0) pid = -1;
  }
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (pipe_copy >= 0) close(pipe_copy);
  if (watch_copy >= 0) close(watch_copy);
  return pid;
}

// A forked lifeline's command line is its launcher's (`mlrun agent ...`): `ps`, `pgrep -f` and
// `pkill -f 'mlrun agent'` would take it for an agent. It names itself instead, over its own
// copy of the arguments' memory (as setproctitle does), zeroing the rest so nothing is shown twice.
void name_command_line() {
  char* args = program_invocation_name;  // glibc: argv[0], the start of the arguments' memory
  if (args == nullptr) return;
  int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  // Its first PATH_MAX bytes, to compare with argv[0]; past them only the length counts.
  char head[PATH_MAX], rest[4096];
  std::size_t total = 0;
  while (true) {
    const bool in_head = total < sizeof head;
    ssize_t n =
        read(fd, in_head ? head + total : rest, in_head ? sizeof head - total : sizeof rest);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      close(fd);
      return;
    }
    if (n == 0) break;
    total += static_cast<std::size_t>(n);
  }
  close(fd);
  constexpr char kName[] = "mlrun-lifeline";
  // The memory must be what the kernel shows: it starts with argv[0] and ends with a NUL.
  const std::size_t first = std::strlen(args) + 1;
  if (total < sizeof kName || first > total || first > sizeof head ||
      std::memcmp(head, args, first) != 0 || args[total - 1] != '\0') {
    return;
  }
  std::memset(args, 0, total);
  std::memcpy(args, kName, sizeof kName);
}

}  // namespace

Lifeline Lifeline::start(int watch_fd, std::chrono::milliseconds bound) {
  return begin(watch_fd, bound, /*program_first=*/true);
}

Lifeline Lifeline::fork_now(int watch_fd, std::chrono::milliseconds bound) {
  return begin(watch_fd, bound, /*program_first=*/false);
}

Lifeline Lifeline::begin(int watch_fd, std::chrono::milliseconds bound, bool program_first) {
  Lifeline l;
  const pid_t launcher = getpid();
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return l;
  const long bound_ms = static_cast<long>(bound.count());
  pid_t pid = -1;
  if (program_first && !lifeline_program().empty()) {
    pid = spawn_lifeline(lifeline_program(), fds[0], watch_fd, bound_ms, launcher);
  }
  // Else (mlrun copied without its lifeline program, or the spawn refused) a fork of this
  // process runs the same loop.
  if (pid < 0) pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return l;
  }
  if (pid == 0) {
    close(fds[1]);
    // Out of the launcher's process group, so that a group-wide signal to the launcher's job
    // (kill -TERM -PGID) still leaves the lifeline to clean up after it.
    setpgid(0, 0);
    name_command_line();
    lifeline_main(fds[0], watch_fd, bound_ms, launcher);
  }
  close(fds[0]);
  l.fd_ = fds[1];
  l.pid_ = pid;
  return l;
}

Lifeline& Lifeline::operator=(Lifeline&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) close(fd_);
    fd_ = other.fd_;
    pid_ = other.pid_;
    other.fd_ = -1;
  }
  return *this;
}

Lifeline::~Lifeline() {
  // Closing the pipe is the lifeline's signal to sweep what is still tracked and exit.
  if (fd_ >= 0) close(fd_);
}

void Lifeline::track(pid_t pgid) {
  if (fd_ >= 0) send(fd_, '+', pgid);
}

void Lifeline::untrack(pid_t pgid) {
  if (fd_ >= 0) send(fd_, '-', pgid);
}

void Lifeline::send_path(char op, const std::string& path) {
  if (fd_ < 0 || path.size() >= PATH_MAX || path.find('\n') != std::string::npos) return;
  std::string line =
      (path.empty() ? std::string(1, static_cast<char>(op + 'a' - 'A')) : op + path) + "\n";
  // One write: a pipe takes up to PIPE_BUF (4 KiB = PATH_MAX) bytes atomically.
  while (write(fd_, line.data(), line.size()) < 0 && errno == EINTR) {
  }
}

void Lifeline::set_bound(std::chrono::milliseconds bound) {
  if (fd_ >= 0) send(fd_, 'B', static_cast<long>(bound.count()));
}

void Lifeline::remove_on_exit(const std::string& dir) {
  send_path('D', dir);
}

void Lifeline::kill_cgroup_on_exit(const std::string& dir) {
  send_path('C', dir);
}

}  // namespace mlrun
