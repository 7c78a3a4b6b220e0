// The signals of a head (a job on --hostfile / -H hosts or a Slurm allocation) while it has no
// event loop of its own: all along when it runs no workers itself, until its node's loop starts
// when it does.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "worker/signals.h"

namespace mlrun {

/// Such a head has no event loop with handlers: the signals would keep their default action,
/// which ends the process at once, so every thread must block them. Construct this before the
/// head starts any thread of its own (the rendezvous server's, the relay): it blocks the
/// policy's signals in the calling thread, every thread started later inherits that, and its own
/// thread reads them from a signalfd, each delivery once. (The SSH pumps, which start while the
/// head connects, block every asynchronous signal themselves: transport/ssh_channel.cc.)
///
/// The first stop signal calls the interrupt callback (when it is set, if it came earlier); a
/// second SIGINT ends the head at once with 130 (its agents then stop their workers as their SSH
/// connections end). A forwarded signal (SIGUSR1, SIGUSR2) calls the forward callback, if set.
/// The signals stay blocked in the constructing thread after stop_watching() and destruction:
/// the head is on its way out, or its node's loop unblocks them once it can take them.
class HeadSignals {
 public:
  explicit HeadSignals(SignalPolicy policy = {});
  ~HeadSignals();
  HeadSignals(const HeadSignals&) = delete;
  HeadSignals& operator=(const HeadSignals&) = delete;

  /// What the first stop signal does (reason: "interrupted: SIGINT on the head"). Set it to
  /// nullptr before what it uses goes away; a call in progress is waited for.
  void on_interrupt(std::function<void(const std::string& reason)> fn);
  /// What each forwarded signal does, on the signals' thread. Same rules as on_interrupt.
  void on_forward(std::function<void(int sig)> fn);
  /// The first stop signal received, or 0.
  int signal() const;
  /// Stops reading the signals (waits for the thread); a later one stays pending. Idempotent;
  /// the destructor calls it.
  void stop_watching();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace mlrun
