#include "worker/lifeline.h"

#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "worker/cgroup.h"
#include "worker/process.h"

namespace mlrun {
namespace {

// Groups one launcher tracks at once; more than this many local workers is far beyond any node.
constexpr int kMaxTracked = 8192;

// The one directory the launcher asked to have removed (its run directory on /dev/shm), or empty.
char tracked_dir[PATH_MAX];
// The node's job cgroup (worker/cgroup.h) to kill and remove, or empty.
char tracked_cgroup[PATH_MAX];

// "XPATH" sets a path, "x" forgets it.
void set_path(char* target, const char* line, std::size_t len, bool set) {
  std::size_t n = set && len - 1 < PATH_MAX ? len - 1 : 0;
  std::memcpy(target, line + 1, n);
  target[n] = '\0';
}

// Applies one line of the pipe: "+PGID" / "-PGID" track and forget a process group, "DPATH" /
// "d" a directory, "CPATH" / "c" a cgroup.
void apply_line(const char* line, std::size_t len, pid_t* tracked, int& count) {
  if (len == 0) return;
  if (line[0] == 'D' || line[0] == 'd') return set_path(tracked_dir, line, len, line[0] == 'D');
  if (line[0] == 'C' || line[0] == 'c') return set_path(tracked_cgroup, line, len, line[0] == 'C');
  pid_t pgid = 0;
  for (std::size_t d = 1; d < len && d < 12; ++d) {
    if (line[d] < '0' || line[d] > '9') return;
    pgid = pgid * 10 + (line[d] - '0');
  }
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
// for bound_ms, when the launcher is SIGKILLed first.
void wait_for_the_end(int fd, int watch, long bound_ms, pid_t launcher, pid_t* tracked,
                      int& count) {
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
      left_ms = std::max(1L, bound_ms);
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
      apply_line(line, len, tracked, count);
      len = 0;
    }
  }
}

[[noreturn]] void lifeline_main(int fd, int watch, long bound_ms, pid_t launcher) {
  prctl(PR_SET_NAME, "mlrun-lifeline");
  // Terminal signals are for the launcher, which forwards them; the lifeline only watches.
  signal(SIGINT, SIG_IGN);
  signal(SIGTERM, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  signal(SIGQUIT, SIG_IGN);
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
  wait_for_the_end(fd, watch, bound_ms, launcher, tracked, count);
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

void send(int fd, char op, pid_t pgid) {
  char line[32];
  int len = std::snprintf(line, sizeof line, "%c%d\n", op, static_cast<int>(pgid));
  // Short writes to a pipe below PIPE_BUF are atomic; a failure means the lifeline is gone and
  // nothing else can be done about it here.
  while (write(fd, line, static_cast<std::size_t>(len)) < 0 && errno == EINTR) {
  }
}

}  // namespace

Lifeline Lifeline::start(int watch_fd, std::chrono::milliseconds bound) {
  Lifeline l;
  const pid_t launcher = getpid();
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return l;
  pid_t pid = fork();
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
    lifeline_main(fds[0], watch_fd, static_cast<long>(bound.count()), launcher);
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

void Lifeline::remove_on_exit(const std::string& dir) {
  send_path('D', dir);
}

void Lifeline::kill_cgroup_on_exit(const std::string& dir) {
  send_path('C', dir);
}

}  // namespace mlrun
