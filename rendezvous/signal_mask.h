// Threads that take no process signal. Here, below every other part, because the rendezvous
// server's own thread is one (rendezvous/server.cc) and the launcher's helpers are others
// (thread_without_signals says why they must be; worker/signals.h includes this).
#pragma once

#include <signal.h>

#include <thread>
#include <utility>

namespace mlrun {

/// Blocks every asynchronous signal in the calling thread (faults, which are a thread's own and
/// cannot wait, stay unblocked) until it goes out of scope, when the thread's mask is put back.
class AsyncSignalsBlocked {
 public:
  AsyncSignalsBlocked();
  ~AsyncSignalsBlocked();
  AsyncSignalsBlocked(const AsyncSignalsBlocked&) = delete;
  AsyncSignalsBlocked& operator=(const AsyncSignalsBlocked&) = delete;

 private:
  sigset_t old_;
};

/// Starts fn on a new thread with every asynchronous signal blocked, so that the process's
/// signals go to the thread that handles them: an agent's event loop (Boost.Asio's handler
/// writes each to a pipe the loop reads), the head's signalfd, or an embedding trainer's own. A
/// helper thread that took one ran that handler beside the loop; one that outlives the loop (the
/// launch tree's relay, a detached watcher, the rendezvous server) could run it while the loop's
/// io_context closes that pipe, and write to a descriptor number since reused. ThreadSanitizer
/// reported it in cli.sim_tree.
template <typename Fn>
std::thread thread_without_signals(Fn&& fn) {
  AsyncSignalsBlocked blocked;  // The new thread inherits this mask; this one gets its own back.
  return std::thread(std::forward<Fn>(fn));
}

}  // namespace mlrun
