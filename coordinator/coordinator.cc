#include "coordinator/coordinator.h"

#include <unistd.h>

#include <climits>
#include <random>

#include <fmt/format.h>

#include "coordinator/keys.h"
#include "worker/net.h"
#include "worker/signals.h"

namespace mlrun::coordinator {
namespace {

rdzv::ClientOptions client_options_for(const NodeJob& job) {
  rdzv::ClientOptions options;
  options.job_id = job.job_id;
  options.timeout = job.join_timeout;
  return options;
}

// The heartbeats' and each attempt's join connection: made after control's, whose hello says
// what is wrong with a token or job id (at once, as the node's start), so that theirs need not be
// a round trip of its own: it is read with their first request, which follows at once.
rdzv::ClientOptions deferred_hello(rdzv::ClientOptions options) {
  options.defer_hello = true;
  return options;
}

// The node's first connection (control): it may wait for a server that is not up yet, up to
// job.connect_timeout, and says so while it does (no other connection waits: the server has
// answered once).
rdzv::ClientOptions first_connection(rdzv::ClientOptions options, const NodeJob& job) {
  options.connect_timeout = job.connect_timeout;
  options.on_connect_retry = [endpoint = job.endpoint, bound = job.connect_timeout,
                              hint = job.waiting_hint](const std::string& why,
                                                       std::chrono::milliseconds waited) {
    fmt::print(stderr, "mlrun: waiting for the rendezvous at {} ({}): {} s so far, up to {} s{}\n",
               endpoint, why, waited.count() / 1000, bound.count() / 1000, hint);
  };
  return options;
}

// "host#1a2b3c4d": this node's identity across rounds, new for every mlrun process.
std::string make_member_id(const std::string& host) {
  std::random_device rd;
  return fmt::format("{}#{:08x}", host.empty() ? host_name() : host, rd());
}

// Elastic: rounds are not the supervisor's restarts; the coordinator counts restarts and ends
// the job itself.
SupervisorConfig supervisor_config(const NodeJob& job) {
  return SupervisorConfig{job.elastic() ? INT_MAX : job.max_restarts, job.grace,
                          /*settled_elsewhere=*/true};
}

}  // namespace

NodeCoordinator::NodeCoordinator(const NodeJob& job, const NodeHooks& hooks,
                                 ProcessSpawner& spawner, RendezvousConnector& rendezvous,
                                 Lifeline& lifeline)
    : job_(job),
      hooks_(hooks),
      rendezvous_(rendezvous),
      elastic_(job.elastic()),
      member_(elastic_ ? make_member_id(job.host) : std::string()),
      client_options_(client_options_for(job)),
      control_(rendezvous.connect(first_connection(client_options_, job))),
      join_(make_join_strategy(job, rendezvous, deferred_hello(client_options_), member_)),
      base_(Environment::current()),
      signal_origin_(make_signal_origin()),
      node_rank_(job.node_rank),
      nnodes_(job.nnodes) {
  // Heartbeats go from a timer on the event loop, so a node whose loop stops (SIGSTOP, D state)
  // stops them while its connections stay open. Elastic: they keep this node in the rounds, and
  // the connection is the node's lifeline on the server (its close loses the node at once).
  // Fixed-size: node heartbeats, from the first join on; the server aborts the job naming a
  // node silent for heartbeat_timeout.
  if (job.nnodes > 1) {
    rdzv::ClientOptions beat_options = deferred_hello(client_options_);
    beat_options.timeout = job.heartbeat_timeout;
    beat_.emplace(rendezvous.connect(beat_options));
    if (elastic_) beat_->heartbeat(kElasticGroup, member_);
  }
  agent_ = std::make_unique<Agent>(io_, spawner, lifeline, nullptr, supervisor_config(job),
                                   make_callbacks(), job.signals);
  // A forwarded signal the head publishes comes back to this node's workers (a node it started).
  if (job.watch_signals && job.nnodes > 1) {
    signal_watcher_.emplace(job.endpoint, job.token, job.job_id, signal_origin_, [this](int sig) {
      post([sig](Supervisor& s) { s.forward_signal(sig); });
    });
  }
}

NodeCoordinator::~NodeCoordinator() {
  if (coordinator_.joinable()) coordinator_.join();
}

AgentCallbacks NodeCoordinator::make_callbacks() {
  AgentCallbacks callbacks;
  callbacks.routes = hooks_.routes;
  callbacks.on_first_failure = [this](const WorkerState& w, const std::deque<std::string>& tail) {
    publish_failure(w, tail);
  };
  callbacks.on_attempt_ended = [this](const AttemptResult& r, const auto&) { report_result(r); };
  callbacks.on_attempt_end = [this](const AttemptResult& r, bool restarting,
                                    const std::vector<std::deque<std::string>>& tails) {
    print_attempt_end(r, restarting, tails);
  };
  callbacks.on_signal = [this](int sig) { on_signal(sig); };
  callbacks.on_forwarded_signal = [this](int sig) { on_forwarded_signal(sig); };
  return callbacks;
}

void NodeCoordinator::post(std::function<void(Supervisor&)> fn) {
  agent_->post(std::move(fn));
}

void NodeCoordinator::deliver_signal(int sig) {
  post([this, sig](Supervisor& s) {
    s.on_signal(sig);
    on_signal(sig);
  });
}

void NodeCoordinator::publish_abort(const std::string& reason) {
  try {
    control_.abort(reason);
  } catch (const rdzv::Error&) {
    // Already aborted, or the server is gone: either way the others learn of it.
  }
}

void NodeCoordinator::abort_here(std::string message, int code) {
  post([this, message = std::move(message), code](Supervisor& s) {
    // The abort this node published for its own signal comes back: the signal already stops
    // the workers, and its exit code (128 + the signal) stands. Where none runs (the signal
    // came while this node joined, or after its workers ended) nothing else would end this
    // node: it ends now, with that code.
    if (interrupt_published_) {
      if (s.running() == 0 && s.interrupt_signal() != 0) s.abort(128 + s.interrupt_signal());
      return;
    }
    aborting_ = true;
    abort_message_ = message;
    s.abort(code);
  });
}

NodeOutcome NodeCoordinator::run(int lifeline_fd) {
  // The coordinator: joins each attempt, waits for its end or a failure anywhere, and settles
  // it with every node's result. Only this thread blocks on the rendezvous.
  coordinator_ = thread_without_signals([this] { coordinate(); });
  // A node whose rank was given (an agent's, a Slurm task's) is watched from now on, while the
  // coordinator joins: its first heartbeat is not a round trip between the join and the spawn.
  if (beat_ && !elastic_ && job_.node_rank >= 0) {
    beat_name_ = heartbeat_name(job_.node_rank);
    send_node_beat();
  }
  if (lifeline_fd >= 0) {
    lifeline_stream_.emplace(io_, dup(lifeline_fd));
    watch_lifeline();
  }
  if (beat_) arm_tick();

  // This node's workers, attempt after attempt, until the job's end.
  int code = agent_->run();
  tick_.cancel();
  // Fixed-size: this node is done, not hung; closing the heartbeats' connection ends the
  // server's watch over it (the node may wait below for the others a while).
  if (!elastic_ && beat_) {
    if (close_watch_armed_) {
      try {
        beat_->node_watch(false);  // This node ends as it should: its close is no loss.
      } catch (const rdzv::Error&) {
        // Aborted, or the server is gone: nobody waits for this node's close then.
      }
    }
    beat_.reset();
  }
  // Without a wait for the watcher's thread (launcher/signal_relay.h).
  if (signal_watcher_) signal_watcher_->stop();
  wait_for_coordinator(code);
  wait_for_every_node();

  NodeOutcome outcome{code, {}, aborting_ ? abort_message_ : std::string()};
  if (verdict_.failed && !verdict_.record.empty()) {
    try {
      outcome.failure = FailureRecord::decode(verdict_.record);
    } catch (const RecordError&) {
      // The code stands; there is no record to name.
    }
  }
  return outcome;
}

// Tells the job why this node gave up, and waits (bounded) for the coordinator thread.
void NodeCoordinator::wait_for_coordinator(int code) {
  auto finished = coordinator_done_.get_future();
  if (parent_gone_ && !job_.tree_parent.empty()) {
    // The parent's own parent reports its loss, naming every agent that went with it: that is
    // the job's reason, and this node's word only follows it (or stands in for it, after a bound).
    finished.wait_for(std::chrono::seconds(5));
  }
  if (aborting_ && !lost_here_ && abort_message_.rfind("job aborted:", 0) != 0) {
    // This node gave up (its rendezvous failed, or its head is gone): tell every node.
    publish_abort(fmt::format("{}: {}", self_name(), abort_message_));
  }
  if (aborting_ && job_.print_summary) fmt::print(stderr, "mlrun: {}\n", abort_message_);
  // The coordinator wakes from the abort or the verdict. A server that vanished without a
  // word would leave it blocked: give it a bound, then leave without it (docs/coding-guidelines.md
  // item 8). A node that left waits for nobody: the others settle the round without it.
  if (finished.wait_for(std::chrono::seconds(leaving_ ? 1 : 10)) == std::future_status::ready) {
    coordinator_.join();
  } else {
    leave_stuck_(code);
  }
}

// The node that serves the rendezvous (node 0, or the endpoint's owner) leaves only once every
// node is done with it: it would otherwise take the server down while another node still reports
// its result. Bounded, so a node that is gone holds nobody; an aborted job fails at once. A node
// that does not serve it leaves at once: its own end is all it owes (an agent's server is the
// head's, which outlives every agent: its transport's finish waits for each to end).
void NodeCoordinator::wait_for_every_node() {
  if (nnodes_ <= 1 || node_rank_ < 0 || leaving_) return;
  try {
    if (job_.mark_done) control_.set(done_key(node_rank_), "1");
    if (!job_.serves_rendezvous) return;
    std::vector<std::string> done;
    for (int n = 0; n < nnodes_; ++n) done.push_back(done_key(n));
    control_.wait(done, std::chrono::seconds(10));
  } catch (const std::exception&) {
  }
}

}  // namespace mlrun::coordinator
