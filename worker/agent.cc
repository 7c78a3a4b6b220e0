#include "worker/agent.h"

#include <utility>  // Boost 1.74's Asio headers use std::exchange without including it.

#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include "worker/stdin.h"

namespace mlrun {

namespace asio = boost::asio;

// Named, not anonymous: Agent::Impl holds them, and in a unity build this file is not the
// unit's main file, where GCC warns of such fields (-Wsubobject-linkage).
namespace agent_detail {

// waitpid's status word for what waitid saw.
inline int wait_status_of(const siginfo_t& info) {
  switch (info.si_code) {
    case CLD_EXITED:
      return (info.si_status & 0xff) << 8;
    case CLD_DUMPED:
      return info.si_status | 0x80;
    default:  // CLD_KILLED
      return info.si_status;
  }
}

// One pipe of one worker, read on the loop.
struct PipeReader {
  PipeReader(asio::io_context& io, int fd, StreamRoute route)
      : stream(io, fd), output(std::move(route), kSummaryTailLines), idle(io) {}
  asio::posix::stream_descriptor stream;
  StreamOutput output;
  // Shows an unfinished line (a prompt, a progress bar) kPartialLineIdle after its first byte not
  // yet shown, even while more bytes of it come.
  asio::steady_timer idle;
  bool idle_armed = false;
  bool open = true;
  char buffer[16384];

  // Reads whatever is there now, without waiting, at most max_reads chunks. Every read of the
  // pipe happens here, in order: the loop only waits for readiness. (An async_read_some that
  // has completed but whose handler has not yet run would hold bytes that a read here overtakes
  // or overwrites, so lines would be lost or torn when a worker exits.)
  void drain(std::size_t max_reads = SIZE_MAX) {
    for (std::size_t i = 0; open && i < max_reads; ++i) {
      ssize_t n = ::read(stream.native_handle(), buffer, sizeof buffer);
      if (n > 0) {
        output.on_data({buffer, static_cast<std::size_t>(n)});
        if (output.has_partial() && !idle_armed) arm_idle();
      } else if (n == 0) {
        close();
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        break;
      } else if (errno != EINTR) {
        close();
      }
    }
  }
  void arm_idle(std::chrono::milliseconds after = kPartialLineIdle) {
    idle_armed = true;
    idle.expires_after(after);
    idle.async_wait([this](const boost::system::error_code& ec) {
      if (ec || !open) {
        idle_armed = false;
        return;
      }
      // The loop may have been held past the wait (a stopped agent, a busy machine, a slow
      // reader of its own output) with the line's rest already in the pipe: read it first (no
      // read arms the timer while this wait is armed, so it is the only one). A pipe that still
      // holds more after that is read on by the loop, and looked at again shortly: a line is
      // shown unfinished only when nothing more of it has come.
      drain(4);
      if (open && output.has_partial()) {
        pollfd p{stream.native_handle(), POLLIN, 0};
        if (::poll(&p, 1, 0) > 0 && (p.revents & POLLIN) != 0) {
          return arm_idle(std::chrono::milliseconds(10));
        }
        output.flush_partial();
      }
      idle_armed = false;
    });
  }
  void close() {
    if (!open) return;
    open = false;
    idle.cancel();
    output.on_eof();
    boost::system::error_code ignored;
    stream.close(ignored);
  }
};

struct WorkerPipes {
  pid_t pid;
  std::unique_ptr<PipeReader> out;
  std::unique_ptr<PipeReader> err;
};

}  // namespace agent_detail

using agent_detail::PipeReader;
using agent_detail::WorkerPipes;

struct Agent::Impl final : SupervisorHooks {
  Impl(asio::io_context& io, ProcessSpawner& spawner, Lifeline& lifeline,
       Supervisor::Planner planner, SupervisorConfig config, AgentCallbacks callbacks,
       SignalPolicy policy)
      : io(io),
        lifeline(lifeline),
        callbacks(std::move(callbacks)),
        config(config),
        stdin_spawner(make_terminal_stdin_spawner(io, spawner)),
        supervisor(*stdin_spawner, *this, std::move(planner), config),
        policy(std::move(policy)),
        signals(io),
        children(io, SIGCHLD),
        timer(io) {
    for (int sig : this->policy.stop) signals.add(sig);
    for (int sig : this->policy.forward) signals.add(sig);
    if (this->policy.job_control) {
      signals.add(SIGTSTP);
      signals.add(SIGCONT);
    }
  }

  asio::io_context& io;
  Lifeline& lifeline;
  AgentCallbacks callbacks;
  SupervisorConfig config;
  // Turns a terminal as a worker's stdin into a pipe fed from it (worker/stdin.h).
  std::unique_ptr<ProcessSpawner> stdin_spawner;
  Supervisor supervisor;
  SignalPolicy policy;
  asio::signal_set signals;
  asio::signal_set children;
  asio::steady_timer timer;
  std::vector<WorkerPipes> pipes;
  // Pipes of an ended attempt whose readers still have operations queued on the loop.
  std::vector<WorkerPipes> retired;

  void read_more(PipeReader* reader) {
    reader->stream.async_wait(asio::posix::stream_descriptor::wait_read,
                              [this, reader](const boost::system::error_code& ec) {
                                if (!reader->open) return;
                                if (ec) {
                                  if (ec != asio::error::operation_aborted) reader->close();
                                  return;
                                }
                                // A few chunks per wake-up, so that one chatty worker cannot starve
                                // the others.
                                reader->drain(4);
                                if (reader->open) read_more(reader);
                              });
  }

  void wait_signals() {
    signals.async_wait([this](const boost::system::error_code& ec, int sig) {
      if (ec) return;
      // Asio counts deliveries: each one that reached the handler comes here once.
      if (sig == SIGTSTP || sig == SIGCONT) {
        // The workers stop first, then this process, as the terminal would stop one group;
        // SIGCONT (fg, bg) wakes this process, which wakes them.
        supervisor.signal_groups(sig);
        if (sig == SIGTSTP) ::raise(SIGSTOP);
      } else if (policy.is_forwarded(sig)) {
        if (policy.forward_own) supervisor.forward_signal(sig);
        if (callbacks.on_forwarded_signal) callbacks.on_forwarded_signal(sig);
      } else {
        supervisor.on_signal(sig);
        if (callbacks.on_signal) callbacks.on_signal(sig);
      }
      check_done();
      if (!supervisor.finished()) wait_signals();
    });
  }

  void take_signals() {
    sigset_t mine;
    sigemptyset(&mine);
    for (int sig : policy.stop) sigaddset(&mine, sig);
    for (int sig : policy.forward) sigaddset(&mine, sig);
    if (policy.job_control) {
      sigaddset(&mine, SIGTSTP);
      sigaddset(&mine, SIGCONT);
    }
    pthread_sigmask(SIG_UNBLOCK, &mine, nullptr);
  }

  void wait_children() {
    children.async_wait([this](const boost::system::error_code& ec, int) {
      if (ec) return;
      reap();
      check_done();
      if (!supervisor.finished()) wait_children();
    });
  }

  void reap() {
    // SIGCHLD coalesces: one delivery may stand for many exits. Only this attempt's workers are
    // waited for, each by its pid: this process may have other children whose ends are not its
    // loop's to take (an interior agent's simulated children, transport/local.h; the head's
    // lifeline), and a waitpid(-1) would take their exit statuses from their own waits.
    //
    // An ended worker is seen, not reaped (WNOWAIT): while it is a zombie its pid, the id of its
    // process group, cannot be given to another process. The attempt's end kills every worker's
    // group, early leavers' too (what they left in it); reaped at once, a pid reused by then
    // would be another job's group (finish_pipes reaps them, after that kill).
    std::vector<std::pair<pid_t, int>> ended;
    for (const auto& w : supervisor.workers()) {
      if (w.end != WorkerEnd::kRunning || w.pid <= 0) continue;
      siginfo_t info{};
      if (waitid(P_PID, static_cast<id_t>(w.pid), &info, WEXITED | WNOHANG | WNOWAIT) == 0 &&
          info.si_pid == w.pid) {
        ended.emplace_back(w.pid, agent_detail::wait_status_of(info));
      }
    }
    for (auto [pid, status] : ended) {
      for (auto& p : pipes) {
        if (p.pid != pid) continue;
        p.out->drain();
        p.err->drain();
      }
      supervisor.on_exit(pid, status);
      if (supervisor.finished()) return;
    }
  }

  void check_done() {
    if (!supervisor.finished()) return;
    signals.cancel();
    children.cancel();
    timer.cancel();
    io.stop();
  }

  // SupervisorHooks.
  void on_spawned(const WorkerState& worker, const SpawnedProcess& process) override {
    lifeline.track(process.pid);
    WorkerRoutes routes = callbacks.routes(supervisor.attempt(), worker.spec);
    WorkerPipes p{process.pid,
                  std::make_unique<PipeReader>(io, process.stdout_fd, std::move(routes.out)),
                  std::make_unique<PipeReader>(io, process.stderr_fd, std::move(routes.err))};
    read_more(p.out.get());
    read_more(p.err.get());
    pipes.push_back(std::move(p));
  }

  void on_first_failure(const WorkerState& worker) override {
    if (!callbacks.on_first_failure) return;
    static const std::deque<std::string> none;
    for (auto& p : pipes) {
      if (p.pid == worker.pid)
        return callbacks.on_first_failure(worker, p.err->output.tail().lines());
    }
    std::deque<std::string> spawn_error;
    if (!worker.spawn_error.empty()) spawn_error.push_back(worker.spawn_error);
    callbacks.on_first_failure(worker, spawn_error);
  }

  // The stderr tails of an ended attempt's workers; reads what is left in their pipes and
  // closes them. Idempotent: a second call returns the tails of the first.
  std::vector<std::deque<std::string>> last_tails;
  const std::vector<std::deque<std::string>>& finish_pipes(const AttemptResult& result) {
    if (pipes.empty() && last_tails.size() == result.workers.size()) return last_tails;
    std::vector<std::deque<std::string>> tails(result.workers.size());
    for (std::size_t i = 0; i < result.workers.size(); ++i) {
      const WorkerState& w = result.workers[i];
      if (!w.spawn_error.empty()) {
        tails[i].push_back(w.spawn_error);
        continue;
      }
      for (auto& p : pipes) {
        if (p.pid != w.pid) continue;
        p.out->drain();
        p.err->drain();
        tails[i] = p.err->output.tail().lines();
      }
    }
    for (auto& p : pipes) {
      // The leader is gone and its group was killed; what is left in the pipe is read now and
      // the pipe closed, even if a process that escaped the group still holds it.
      p.out->close();
      p.err->close();
      lifeline.untrack(p.pid);
      // Its group was killed (Supervisor::end_attempt): the pid may go now (reap).
      int status;
      while (waitpid(p.pid, &status, WNOHANG) < 0 && errno == EINTR) {
      }
      retired.push_back(std::move(p));
    }
    pipes.clear();
    last_tails = std::move(tails);
    return last_tails;
  }

  void on_attempt_ended(const AttemptResult& result) override {
    const auto& tails = finish_pipes(result);
    if (callbacks.on_attempt_ended) callbacks.on_attempt_ended(result, tails);
  }

  void on_attempt_end(const AttemptResult& result, bool restarting) override {
    const auto& tails = finish_pipes(result);
    if (callbacks.on_attempt_end) callbacks.on_attempt_end(result, restarting, tails);
    last_tails.clear();
  }

  void arm_timer(std::chrono::milliseconds delay) override {
    timer.expires_after(delay);
    timer.async_wait([this](const boost::system::error_code& ec) {
      if (ec) return;
      supervisor.on_grace_expired();
      check_done();
    });
  }

  void cancel_timer() override { timer.cancel(); }

  WallTime now() override { return std::chrono::system_clock::now(); }
};

Agent::Agent(asio::io_context& io, ProcessSpawner& spawner, Lifeline& lifeline,
             Supervisor::Planner planner, SupervisorConfig config, AgentCallbacks callbacks,
             SignalPolicy signals)
    : impl_(std::make_unique<Impl>(io, spawner, lifeline, std::move(planner), config,
                                   std::move(callbacks), std::move(signals))) {}

Agent::~Agent() = default;

int Agent::run() {
  // Handlers first, then workers: no exit or signal can come before it can be seen.
  impl_->wait_signals();
  impl_->wait_children();
  // This thread takes the policy's signals from here. A head blocks them until its node's loop
  // can (launcher/launch_hosts.cc): one that came meanwhile is delivered now, to the handler.
  impl_->take_signals();
  if (!impl_->config.settled_elsewhere) impl_->supervisor.start();
  // A worker may have ended between spawn and the first wait: look once before sleeping.
  impl_->reap();
  impl_->check_done();
  if (!impl_->supervisor.finished()) impl_->io.run();
  return impl_->supervisor.exit_code();
}

void Agent::post(std::function<void(Supervisor&)> fn) {
  asio::post(impl_->io, [impl = impl_.get(), fn = std::move(fn)] {
    if (impl->supervisor.finished()) return;
    fn(impl->supervisor);
    impl->check_done();
  });
}

}  // namespace mlrun
