#include "launcher/head_signals.h"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include <fmt/format.h>

namespace mlrun {

struct HeadSignals::State {
  SignalPolicy policy;
  sigset_t signals;
  int signal_fd = -1;
  int stop_fd = -1;  // An eventfd: the destructor's wake-up.
  std::mutex mutex;  // Held while a callback runs.
  std::function<void(const std::string&)> callback;
  std::function<void(int)> forward;
  std::string pending;  // The reason of a stop signal that came before the callback.
  std::atomic<int> first{0};
  std::thread waiter;

  std::chrono::steady_clock::time_point first_at;

  void on_stop_signal(int sig) {
    if (first != 0) {
      // The same Ctrl-C twice (a wrapper passing it on) is not a second one (worker/supervisor.h).
      if (sig != SIGINT || std::chrono::steady_clock::now() - first_at < kRepeatedSignal) return;
      // A second SIGINT: leave now. The SSH connections end with this process, and every agent
      // stops its workers when its connection to the head is gone.
      const char message[] = "mlrun: second SIGINT: exiting at once\n";
      [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, message, sizeof message - 1);
      std::_Exit(130);
    }
    first = sig;
    first_at = std::chrono::steady_clock::now();
    std::string reason = fmt::format("interrupted: {} on the head", signal_name(sig));
    std::lock_guard lock(mutex);
    if (callback) {
      callback(reason);
    } else {
      pending = std::move(reason);
    }
  }

  void run() {
    while (true) {
      pollfd fds[2] = {{signal_fd, POLLIN, 0}, {stop_fd, POLLIN, 0}};
      if (poll(fds, 2, -1) < 0) continue;
      // A signal sent before stop_watching() is read before the thread ends: it is the head's.
      if (fds[0].revents == 0) {
        if (fds[1].revents != 0) return;
        continue;
      }
      signalfd_siginfo info;
      if (::read(signal_fd, &info, sizeof info) != static_cast<ssize_t>(sizeof info)) continue;
      int sig = static_cast<int>(info.ssi_signo);
      if (policy.is_forwarded(sig)) {
        std::lock_guard lock(mutex);
        if (forward) forward(sig);
      } else {
        on_stop_signal(sig);
      }
    }
  }
};

HeadSignals::HeadSignals(SignalPolicy policy) : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.policy = std::move(policy);
  sigemptyset(&s.signals);
  for (int sig : s.policy.stop) sigaddset(&s.signals, sig);
  for (int sig : s.policy.forward) sigaddset(&s.signals, sig);
  pthread_sigmask(SIG_BLOCK, &s.signals, nullptr);
  s.signal_fd = signalfd(-1, &s.signals, SFD_CLOEXEC);
  s.stop_fd = eventfd(0, EFD_CLOEXEC);
  if (s.signal_fd < 0 || s.stop_fd < 0) {
    // Without them the signals stay blocked and pending: the head cannot be interrupted, but
    // is not killed half-way either. Say so.
    fmt::print(stderr, "mlrun: warning: cannot watch signals (signalfd/eventfd): {}\n",
               std::strerror(errno));
    return;
  }
  s.waiter = std::thread([&s] { s.run(); });
}

HeadSignals::~HeadSignals() {
  stop_watching();
}

void HeadSignals::stop_watching() {
  State& s = *state_;
  if (s.waiter.joinable()) {
    std::uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(s.stop_fd, &one, sizeof one);
    s.waiter.join();
  }
  for (int* fd : {&s.signal_fd, &s.stop_fd}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
}

void HeadSignals::on_interrupt(std::function<void(const std::string&)> fn) {
  std::lock_guard lock(state_->mutex);
  state_->callback = std::move(fn);
  if (state_->callback && !state_->pending.empty()) {
    state_->callback(state_->pending);
    state_->pending.clear();
  }
}

void HeadSignals::on_forward(std::function<void(int)> fn) {
  std::lock_guard lock(state_->mutex);
  state_->forward = std::move(fn);
}

int HeadSignals::signal() const {
  return state_->first;
}

}  // namespace mlrun
