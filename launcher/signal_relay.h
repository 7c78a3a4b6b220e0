// Forwarded signals (SIGUSR1, SIGUSR2) across the nodes of a job a head started on several hosts,
// through the job's rendezvous, as its abort travels (docs/launcher.md, "Signals").
//
// The head publishes each forwarded signal it receives as the next numbered entry of the store;
// every node watches the entries on a connection of its own and passes each signal to its
// workers. Keys (job-wide, not per attempt):
//   mlrun/signal/count   entries so far (add)
//   mlrun/signal/N       {"sig": 10, "from": ORIGIN} (N from 1)
// (Until 2026-12 a watcher's end was an entry too, {"end": true, "from": ORIGIN}, which every
// other watcher read past: N^2 reads at the end of a job of N nodes. A watcher skips one still.)
#pragma once

#include <functional>
#include <memory>
#include <string>

#include <mlrun/rendezvous.hpp>

namespace mlrun {

/// A random identity for one process's publisher and watcher: a watcher skips its own entries.
std::string make_signal_origin();

/// Publishes sig for every node. Quick requests only; errors (an aborted job, a lost server) are
/// the caller's to ignore.
void publish_signal(rendezvous::Client& c, int sig, const std::string& origin);

/// Watches the entries on its own thread and connection and calls on_signal (on that thread)
/// for each signal published by another origin, in order, once each.
class SignalWatcher {
 public:
  SignalWatcher(const std::string& endpoint, const std::string& token, const std::string& job_id,
                std::string origin, std::function<void(int sig)> on_signal);
  /// Stops, then waits (at most a second) for the thread to end and let go of on_signal, so
  /// that no thread unwinds while the process exits: in a statically linked mlrun that aborted
  /// (exit() takes away the unwinder's tables; bench/README.md, 2026-12-07).
  ~SignalWatcher();
  SignalWatcher(const SignalWatcher&) = delete;
  SignalWatcher& operator=(const SignalWatcher&) = delete;

  /// Ends the watch: interrupts the watcher's connection (no request to the server) and returns
  /// without waiting for its thread. After stop, on_signal is never called again. (Waiting here
  /// was 1-4 ms of every agent's exit on two busy cores: a wake-up and an exception.)
  void stop();

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace mlrun
