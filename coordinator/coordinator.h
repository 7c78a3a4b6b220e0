// One node's part of a job as an object (coordinator/node.h run_node wires the real parts):
// the steps of every attempt -- join, start attempt, publish failure, report result, settle --
// over one loop for fixed-size and elastic jobs (coordinator/join.h). Workers start through a
// ProcessSpawner (worker/process.h) and the rendezvous is reached through a RendezvousConnector,
// so tests run many nodes as threads with fake workers against an in-process server.
//
// Threads: the event loop (run()'s caller) runs the Agent (worker/agent.h), the heartbeats and
// every callback; the coordinator thread is the only one that blocks on the rendezvous (joins,
// the wait for an attempt's end). It hands everything to the loop through Agent::post.
#pragma once

#include <utility>  // Boost 1.74's Asio headers use std::exchange without including it.

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <mlrun/rendezvous.hpp>

#include "coordinator/join.h"
#include "coordinator/node.h"
#include "coordinator/records.h"
#include "launcher/signal_relay.h"
#include "worker/agent.h"

namespace mlrun::coordinator {

/// How this node's part of the job ended.
struct NodeOutcome {
  /// The job's exit code (coordinator/node.h run_node).
  int exit_code = 1;
  /// The job's first failure, wherever it was, when the last attempt failed with one.
  std::optional<FailureRecord> failure;
  /// Set when this node ended on an abort (its own, or the job's): the reason.
  std::string abort_message;
};

class NodeCoordinator {
 public:
  /// Connects to the rendezvous (throws rdzv::Error). Every reference must outlive this object.
  NodeCoordinator(const NodeJob& job, const NodeHooks& hooks, ProcessSpawner& spawner,
                  RendezvousConnector& rendezvous, Lifeline& lifeline);
  ~NodeCoordinator();
  NodeCoordinator(const NodeCoordinator&) = delete;
  NodeCoordinator& operator=(const NodeCoordinator&) = delete;

  /// Runs every attempt of this node to the job's end, on the calling thread. lifeline_fd >= 0
  /// is watched: its end-of-file (the head is gone) stops this node. Call once.
  NodeOutcome run(int lifeline_fd = -1);

  /// A stop signal reached this node: what the Agent does for one of job.signals.stop (passes it
  /// to the workers, then on_signal). For a caller that watches signals itself. Any thread.
  void deliver_signal(int sig);
  /// What happens when the coordinator thread is still blocked 10 s after this node's workers
  /// ended (a server that vanished without a word): by default the process leaves with the
  /// job's code (docs/coding-guidelines.md item 8), since the thread cannot be unwound. A test
  /// makes that a failure instead. leave must not return. Call before run().
  void on_stuck_coordinator(std::function<void(int code)> leave) {
    leave_stuck_ = std::move(leave);
  }
  /// Runs fn on the loop with this node's supervisor. A spawner whose processes are not this
  /// process's children (a fake) reports their exits here (Supervisor::on_exit). Any thread.
  void post(std::function<void(Supervisor&)> fn);

 private:
  AgentCallbacks make_callbacks();
  // Steps of the loop's side (coordinator/attempt.cc).
  void publish_failure(const WorkerState& w, const std::deque<std::string>& tail);
  void report_result(const AttemptResult& r);
  void print_attempt_end(const AttemptResult& r, bool restarting,
                         const std::vector<std::deque<std::string>>& tails);
  void on_signal(int sig);
  void leave_on_sigterm();
  void on_forwarded_signal(int sig);
  void abort_here(std::string message, int code);
  void publish_abort(const std::string& reason);
  // The coordinator thread's steps (coordinator/attempt.cc).
  void coordinate();
  void coordinate_attempts();
  void start_attempt(Joined& j, int restarts_spent);
  std::vector<WorkerSpec> make_specs(Joined& j, int restart_count);
  std::string master_address(Joined& j);
  void watch_for_failure(Joined& j);
  bool settle(Joined& j, int& restarts_spent);
  // Timers and watches on the loop (coordinator/watch.cc).
  void watch_lifeline();
  void arm_tick();
  void tick();
  void send_node_beat();
  void arm_close_watch();
  void cannot_report(std::string_view what, const rdzv::Error& e);
  // "node 1 (host2)": who a fixed-size node's heartbeats name.
  std::string heartbeat_name(int node_rank) const;
  // How this node's own messages name it: heartbeat_name's form, or "host2 (no rank yet)" for a
  // node whose rank the rendezvous has not given yet (--rdzv_endpoint without --node_rank).
  std::string self_name() const;
  void check_change();
  // On the tick: a node that does not serve the rendezvous says it still waits in a join, at half
  // join_timeout (at most 30 s) and every minute after; the serving node's log names whom for.
  void report_join(std::chrono::steady_clock::time_point now);
  void fill_lost_results(int g, const MembershipChange& change);
  // The end of run() (coordinator/coordinator.cc).
  void wait_for_coordinator(int code);
  void wait_for_every_node();

  const NodeJob& job_;
  const NodeHooks& hooks_;
  RendezvousConnector& rendezvous_;
  const bool elastic_;
  const std::string member_;  ///< Elastic: this node's identity across rounds.
  rdzv::ClientOptions client_options_;
  // The loop's own connection: only quick requests (set, compare-and-set, abort), so the loop
  // never blocks on the rendezvous; everything that waits runs on the coordinator's thread.
  rdzv::Client control_;
  // Heartbeats, in every multi-node job, on a connection of their own whose every request is
  // bounded by heartbeat_timeout (docs/multinode.md).
  std::optional<rdzv::Client> beat_;
  bool close_watch_armed_ = false;  // node_watch(true) was accepted (watch.cc arm_close_watch)
  std::unique_ptr<JoinStrategy> join_;
  Environment base_;
  boost::asio::io_context io_;
  const std::string signal_origin_;
  std::unique_ptr<Agent> agent_;
  std::optional<SignalWatcher> signal_watcher_;

  // Loop-thread state of the running attempt.
  int attempt_ = 0;
  int node_rank_;
  int nnodes_;
  bool aborting_ = false;
  std::string abort_message_;
  // Elastic, on the loop: the round whose change key is watched, whether this node's result of
  // it is out (after that, the verdict decides), whether its change was acted on, lost nodes
  // whose results were filled in, and whether this node lost the rendezvous itself.
  int active_round_ = -1;
  bool result_written_ = false;
  bool change_handled_ = false;
  std::set<int> lost_filled_;
  bool lost_here_ = false;
  // A signal reached this launcher and the job's abort for it went out.
  bool interrupt_published_ = false;
  // Fixed-size: this node's name in its heartbeats ("node 1 (host2)"), known once it joined;
  // empty before, and after a server that has no node heartbeats refused one.
  std::string beat_name_;
  bool node_beats_work_ = false;
  // Elastic: SIGTERM made this node leave the job (set on the loop, read by the coordinator).
  std::atomic<bool> leaving_{false};
  // The joined round's connection while the coordinator watches and settles it: a node that
  // leaves shuts it, so the coordinator wakes at once (it waits for nobody's result).
  std::mutex watching_mutex_;
  rdzv::Client* watching_ = nullptr;
  // When the coordinator's join under way began (steady clock, in ms; 0: none), and on the
  // loop, the join the last waiting line was for and when the next one is due.
  std::atomic<std::int64_t> joining_since_ms_{0};
  std::int64_t reported_join_ = 0;
  std::chrono::milliseconds next_join_report_{0};
  // The verdict on the last settled attempt, set on the loop before Supervisor::settle so that
  // print_attempt_end can print it; whether it ends the job; restarts spent so far.
  Settled verdict_;
  bool final_round_ = false;
  int restarts_spent_ = 0;

  // The coordinator thread and its end.
  std::thread coordinator_;
  std::function<void(int code)> leave_stuck_ = [](int code) {
    std::fflush(nullptr);
    std::_Exit(code);
  };
  std::promise<void> coordinator_done_;
  // The head's lifeline (an agent's stdin) and the heartbeat tick.
  bool parent_gone_ = false;
  std::optional<boost::asio::posix::stream_descriptor> lifeline_stream_;
  boost::asio::steady_timer tick_{io_};
  std::chrono::steady_clock::time_point last_beat_ = std::chrono::steady_clock::now();
};

}  // namespace mlrun::coordinator
