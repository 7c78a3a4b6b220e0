#include "worker/supervisor.h"

#include <signal.h>
#include <string.h>
#include <sys/wait.h>

#include <fmt/format.h>

#include "worker/log.h"
#include "worker/signals.h"

namespace mlrun {

int exit_code_from_status(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

std::string describe_status(int wait_status) {
  if (WIFEXITED(wait_status)) return fmt::format("exit code {}", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    int sig = WTERMSIG(wait_status);
    const char* abbrev = sigabbrev_np(sig);
    return fmt::format("signal SIG{} ({}){}", abbrev ? abbrev : "?", sig,
                       WCOREDUMP(wait_status) ? ", core dumped" : "");
  }
  return fmt::format("wait status {:#x}", wait_status);
}

Supervisor::Supervisor(ProcessSpawner& spawner, SupervisorHooks& hooks, Planner planner,
                       SupervisorConfig config)
    : spawner_(spawner), hooks_(hooks), planner_(std::move(planner)), config_(config) {}

void Supervisor::start() {
  attempt_ = 0;
  start_attempt();
}

void Supervisor::start_attempt() {
  std::vector<WorkerSpec> specs;
  try {
    specs = planner_(attempt_);
  } catch (const std::exception& e) {
    plan_error_ = e.what();
  }
  begin_attempt(attempt_, std::move(specs));
}

void Supervisor::begin_attempt(int attempt, std::vector<WorkerSpec> specs) {
  if (finished_) return;
  attempt_ = attempt;
  workers_.clear();
  first_failure_.reset();
  remote_failure_ = false;
  // A stop signal that came between attempts (this node joined the next one as it came) starts
  // none of its workers: it would otherwise run on, unsignalled, on a node that has left.
  stopping_ = interrupt_signal_ != 0;
  settling_ = false;
  running_ = 0;
  for (auto& spec : specs) workers_.emplace_back().spec = std::move(spec);
  spawn_all();
}

void Supervisor::spawn_all() {
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    WorkerState& w = workers_[i];
    if (stopping_) {
      // An earlier worker could not start (the attempt is already failed), or a stop signal
      // came before the attempt began: start no more.
      w.end = WorkerEnd::kStopped;
      w.ended_at = hooks_.now();
      continue;
    }
    try {
      auto started = std::chrono::steady_clock::now();
      SpawnedProcess p = spawner_.spawn(w.spec.request);
      log::debug("attempt {}: spawned rank {} (local rank {}) as pid {} in {:.3f} s", attempt_,
                 w.spec.rank, w.spec.local_rank, p.pid, log::since(started));
      w.pid = p.pid;
      ++running_;
      hooks_.on_spawned(w, p);
    } catch (const SpawnError& e) {
      w.spawn_error = e.what();
      w.end = WorkerEnd::kFailed;
      w.wait_status = 127 << 8;  // What a shell reports for a command it could not run.
      w.ended_at = hooks_.now();
      first_failure_ = i;
      hooks_.on_first_failure(w);
      stop_all(SIGTERM);
    }
  }
  if (running_ == 0) end_attempt();
}

void Supervisor::stop_all(int sig) {
  for (auto& w : workers_) {
    if (w.end != WorkerEnd::kRunning) continue;
    w.signalled = true;
    log::debug("attempt {}: signal {} ({}) to rank {}, process group {}", attempt_, sig,
               sigabbrev_np(sig) ? sigabbrev_np(sig) : "?", w.spec.rank, w.pid);
    spawner_.signal_group(w.pid, sig);
  }
  // The grace period runs from the first stop: a later abort or signal repeats its signal but
  // does not move SIGKILL further away.
  if (!stopping_) hooks_.arm_timer(config_.grace_period);
  stopping_ = true;
}

void Supervisor::on_exit(pid_t pid, int wait_status) {
  if (finished_) return;
  for (std::size_t i = 0; i < workers_.size(); ++i) {
    WorkerState& w = workers_[i];
    if (w.pid != pid || w.end != WorkerEnd::kRunning) continue;
    w.wait_status = wait_status;
    w.ended_at = hooks_.now();
    --running_;
    log::debug("attempt {}: rank {} (pid {}) ended: {}; {} still running", attempt_, w.spec.rank,
               pid, describe_status(wait_status), running_);
    if (WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0) {
      w.end = WorkerEnd::kSucceeded;
    } else if (w.signalled) {
      w.end = WorkerEnd::kStopped;
    } else {
      w.end = WorkerEnd::kFailed;
      if (!first_failure_ && interrupt_signal_ == 0) {
        first_failure_ = i;
        hooks_.on_first_failure(w);
        stop_all(SIGTERM);
      }
    }
    if (running_ == 0) end_attempt();
    return;
  }
}

void Supervisor::abort(int exit_code) {
  if (finished_) return;
  abort_code_ = exit_code;
  if (running_ == 0) {
    finished_ = true;
    exit_code_ = exit_code;
    return;
  }
  stop_all(SIGTERM);
}

void Supervisor::on_signal(int sig) {
  if (finished_) return;
  if (interrupt_signal_ != 0 && sig == SIGINT) {
    // One Ctrl-C can arrive twice: the terminal sends it to its foreground group, and a wrapper
    // in that group passes its own on (`timeout --foreground`). Only a later one is a second.
    if (hooks_.now() - interrupted_at_ < kRepeatedSignal) return;
    fmt::print(stderr,
               "mlrun: a second SIGINT: killing every worker now, without the grace period\n");
    stop_all(SIGKILL);
    return;
  }
  if (interrupt_signal_ == 0) {
    interrupt_signal_ = sig;
    interrupted_at_ = hooks_.now();
  }
  stop_all(sig);
}

int Supervisor::forward_signal(int sig) {
  return signal_running(sig, /*groups=*/false);
}

int Supervisor::signal_groups(int sig) {
  return signal_running(sig, /*groups=*/true);
}

int Supervisor::signal_running(int sig, bool groups) {
  if (finished_) return 0;
  int sent = 0;
  for (const auto& w : workers_) {
    if (w.end != WorkerEnd::kRunning || w.pid <= 0) continue;
    groups ? spawner_.signal_group(w.pid, sig) : spawner_.signal_process(w.pid, sig);
    ++sent;
  }
  return sent;
}

void Supervisor::on_remote_failure(int exit_code) {
  if (finished_ || stopping_) return;
  remote_failure_ = true;
  remote_exit_code_ = exit_code;
  stop_all(SIGTERM);
}

void Supervisor::on_grace_expired() {
  if (finished_ || !stopping_) return;
  stop_all(SIGKILL);
}

void Supervisor::end_attempt() {
  hooks_.cancel_timer();
  // Leaders are gone; whatever they left in their groups goes with them.
  for (const auto& w : workers_) {
    if (w.pid > 0) spawner_.signal_group(w.pid, SIGKILL);
  }
  // And what left the groups (daemons): gone before the result is told and a next attempt starts.
  spawner_.sweep();
  ended_ = AttemptResult{attempt_,          workers_,        first_failure_,
                         interrupt_signal_, remote_failure_, plan_error_};
  if (abort_code_ >= 0) {
    hooks_.on_attempt_end(*ended_, false);
    finished_ = true;
    exit_code_ = abort_code_;
    return;
  }
  if (config_.settled_elsewhere && interrupt_signal_ == 0) {
    settling_ = true;
    hooks_.on_attempt_ended(*ended_);
    return;
  }
  int local_code = first_failure_ ? exit_code_from_status(workers_[*first_failure_].wait_status)
                                  : remote_exit_code_;
  finish(ended_->failed(), local_code);
}

void Supervisor::settle(bool failed, int exit_code) {
  if (finished_ || !settling_) return;
  settling_ = false;
  finish(failed, exit_code);
}

void Supervisor::finish(bool failed, int failed_code) {
  bool restarting =
      failed && interrupt_signal_ == 0 && plan_error_.empty() && attempt_ < config_.max_restarts;
  hooks_.on_attempt_end(*ended_, restarting);
  if (restarting) {
    ++attempt_;
    // Multi-node: the next attempt begins when every node has joined it (begin_attempt).
    if (!config_.settled_elsewhere) start_attempt();
    return;
  }
  finished_ = true;
  if (interrupt_signal_ != 0) {
    exit_code_ = 128 + interrupt_signal_;
  } else if (!plan_error_.empty()) {
    exit_code_ = 1;
  } else {
    exit_code_ = failed ? failed_code : 0;
  }
}

}  // namespace mlrun
