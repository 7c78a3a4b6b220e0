#include "worker/lifeline.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace mlrun {
namespace {

// Groups one launcher tracks at once; more than this many local workers is far beyond any node.
constexpr int kMaxTracked = 8192;

[[noreturn]] void lifeline_main(int fd) {
  prctl(PR_SET_NAME, "mlrun-lifeline");
  // Terminal signals are for the launcher, which forwards them; the lifeline only watches.
  signal(SIGINT, SIG_IGN);
  signal(SIGTERM, SIG_IGN);
  signal(SIGHUP, SIG_IGN);
  signal(SIGQUIT, SIG_IGN);
  // Hold none of the launcher's terminals or pipes open: whoever reads the launcher's output
  // must see it end when the launcher ends.
  int devnull = open("/dev/null", O_RDWR);
  for (int i = 0; i < 3; ++i) dup2(devnull, i);
  static pid_t tracked[kMaxTracked];
  int count = 0;
  char buf[4096];
  char number[32];
  int digits = 0;
  bool adding = true;
  while (true) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (ssize_t i = 0; i < n; ++i) {
      char c = buf[i];
      if (c == '+' || c == '-') {
        adding = c == '+';
        digits = 0;
      } else if (c >= '0' && c <= '9' && digits < 30) {
        number[digits++] = c;
      } else if (c == '\n') {
        pid_t pgid = 0;
        for (int d = 0; d < digits; ++d) pgid = pgid * 10 + (number[d] - '0');
        digits = 0;
        if (pgid <= 0) continue;
        if (adding) {
          if (count < kMaxTracked) tracked[count++] = pgid;
        } else {
          for (int k = 0; k < count; ++k) {
            if (tracked[k] == pgid) {
              tracked[k] = tracked[--count];
              break;
            }
          }
        }
      }
    }
  }
  for (int k = 0; k < count; ++k) killpg(tracked[k], SIGKILL);
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

Lifeline Lifeline::start() {
  Lifeline l;
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
    lifeline_main(fds[0]);
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

}  // namespace mlrun
