// The signals of a head that runs no workers itself (a job on --hostfile / -H hosts, this host
// not among them).
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
/// The signals stay blocked in the constructing thread after destruction: the head is on its way
/// out.
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

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace mlrun
