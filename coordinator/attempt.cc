// The steps of an attempt: the coordinator thread joins it, starts it, watches for a failure
// elsewhere and settles it; the loop publishes a failure here and reports this node's result.
#include <signal.h>
#include <unistd.h>

#include <cstring>

#include <fmt/format.h>

#include "coordinator/coordinator.h"
#include "coordinator/keys.h"
#include "launcher/summary.h"
#include "worker/log.h"
#include "worker/net.h"

namespace mlrun::coordinator {

// --- The coordinator thread -------------------------------------------------------------------

void NodeCoordinator::coordinate() {
  try {
    coordinate_attempts();
  } catch (const rdzv::AbortedError& e) {
    bool interrupted = e.detail().rfind("interrupted", 0) == 0;
    abort_here(fmt::format("job aborted: {}", e.detail()), interrupted ? 130 : 1);
  } catch (const rdzv::AuthError& e) {
    abort_here(refusal_reason(job_, e), 1);
  } catch (const rdzv::ConnectionError& e) {
    // The node that serves it ended or was killed (its own loss is said by its own terminal).
    abort_here(job_.serves_rendezvous
                   ? std::string(e.what())
                   : fmt::format("this node lost the rendezvous at {} (the node serving it ended, "
                                 "was killed, or cannot be reached): {}",
                                 job_.endpoint, e.what()),
               1);
  } catch (const std::exception& e) {
    abort_here(e.what(), 1);
  }
  coordinator_done_.set_value();
}

// One loop for both kinds of job: a failure spends a restart; an elastic membership change
// (a node joined or was lost) does not. A node that left on SIGTERM joins no more rounds.
void NodeCoordinator::coordinate_attempts() {
  int restarts_spent = 0;  // This thread's count (the loop's copy is restarts_spent_).
  while (!leaving_) {
    struct Joining {  // What the loop's waiting line reads (report_join), while the join blocks.
      std::atomic<std::int64_t>& since;
      ~Joining() { since = 0; }
    } joining{joining_since_ms_};
    joining.since = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::steady_clock::now().time_since_epoch())
                        .count();
    Joined j = join_->join(restarts_spent);
    joining.since = 0;
    // The attempt's start publishes node 0's master address, which the others wait for: it
    // goes out even from a node that leaves now (its supervisor starts no worker).
    start_attempt(j, restarts_spent);
    struct Watching {  // What a node that leaves shuts (leave_on_sigterm).
      NodeCoordinator& node;
      explicit Watching(NodeCoordinator& n, rdzv::Client& c) : node(n) {
        std::lock_guard lock(node.watching_mutex_);
        node.watching_ = &c;
        if (node.leaving_) c.interrupt();  // It left as this attempt started.
      }
      ~Watching() {
        std::lock_guard lock(node.watching_mutex_);
        node.watching_ = nullptr;
      }
    } watching{*this, j.client};
    watch_for_failure(j);
    if (!settle(j, restarts_spent)) break;
  }
}

void NodeCoordinator::start_attempt(Joined& j, int restarts_spent) {
  std::vector<WorkerSpec> specs = make_specs(j, restarts_spent);
  agent_->post([this, g = j.g, a = j.assignment, note = j.note,
                specs = std::move(specs)](Supervisor& s) mutable {
    if (!note.empty() && job_.print_summary) fmt::print(stderr, "{}", note);
    attempt_ = g;
    node_rank_ = a.node_rank;
    nnodes_ = a.nnodes;
    if (elastic_) {
      active_round_ = g;
      result_written_ = false;
      change_handled_ = false;
      lost_filled_.clear();
    } else if (beat_ && g == 0 && beat_name_.empty()) {
      // The server watches this node from its first heartbeat: before its workers start, so
      // that a node that hangs at any time after is noticed (NodeCoordinator::run sent it
      // already when this node's rank was given).
      beat_name_ = heartbeat_name(a.node_rank);
      send_node_beat();
    }
    s.begin_attempt(g, std::move(specs));
  });
}

// MASTER_ADDR:MASTER_PORT of attempt j: node 0 sets it, every other node reads it.
std::string NodeCoordinator::master_address(Joined& j) {
  rdzv::Client& c = j.client;
  if (j.assignment.node_rank != 0) return c.get(key(j.g, "master"), job_.join_timeout);
  std::string master;
  if (job_.env.agent_store) {
    // The rendezvous server is the TCPStore (docs/torch-store.md): a fresh key space for this
    // attempt before any of its workers starts (the others wait for the master key).
    c.set(std::string(rdzv::kTorchStoreGenerationKey), std::to_string(j.g));
    master = job_.endpoint;
  } else {
    std::string addr = job_.master_addr;
    if (addr.empty()) {
      std::string host;
      int port;
      split_endpoint(job_.endpoint, host, port);
      addr = local_address_toward(host);
    }
    master = fmt::format("{}:{}", addr, job_.master_port != 0 ? job_.master_port : free_tcp_port());
  }
  c.set(key(j.g, "master"), master);
  return master;
}

// This node's workers of attempt j (restart_count: TORCHELASTIC_RESTART_COUNT).
std::vector<WorkerSpec> NodeCoordinator::make_specs(Joined& j, int restart_count) {
  const rdzv::NodeAssignment& a = j.assignment;
  std::string master = master_address(j);
  GroupEnv env = job_.env;
  env.node_rank = a.node_rank;
  env.nnodes = a.nnodes;
  env.rank_offset = a.rank_offset;
  env.local_world_size = job_.nproc;
  env.world_size = a.world_size;
  if (!split_endpoint(master, env.master_addr, env.master_port)) {
    throw std::runtime_error(fmt::format("bad master address {} from node 0", master));
  }
  env.restart_count = restart_count;
  env.rdzv_endpoint = job_.endpoint;
  env.rdzv_token = job_.token;
  // The round scopes the rendezvous client's keys (Client::from_env), so a round that is not a
  // restart still never sees an earlier round's barriers, NCCL IDs or GlooStore keys.
  if (elastic_) env.overrides.emplace_back("MLRUN_RDZV_ROUND", std::to_string(j.g));
  std::vector<WorkerSpec> specs;
  for (int lr = 0; lr < job_.nproc; ++lr) {
    int rank = a.rank_offset + lr;
    specs.push_back(
        WorkerSpec{rank, lr,
                   SpawnRequest{job_.argv,
                                worker_environment(base_, env, lr, hooks_.error_file(j.g, rank)),
                                {},
                                job_.stdin_to_rank0 && rank == 0 ? STDIN_FILENO : -1}});
    if (lr < static_cast<int>(job_.numa.size())) {
      specs.back().request.cpus = job_.numa[lr].cpus;
      specs.back().request.mem_nodes = job_.numa[lr].mem_nodes;
    }
  }
  return specs;
}

// Waits for this node's notice of attempt j: a failure elsewhere or a membership change stops
// this node's workers; "end" is this node's own group ending.
void NodeCoordinator::watch_for_failure(Joined& j) {
  std::string note = get_eventually(j.client, notify_key(j.g, j.assignment.node_rank));
  if (note == "fail") {
    int code = failure_code(j.client.get(key(j.g, "failed")));
    agent_->post([code](Supervisor& s) { s.on_remote_failure(code); });
  } else if (note == "change") {
    agent_->post([](Supervisor& s) { s.on_remote_failure(1); });
  }
}

// Settles attempt j with every node; returns whether another attempt follows.
bool NodeCoordinator::settle(Joined& j, int& restarts_spent) {
  Settled v = join_->settle(j);
  bool final_failure = v.failed && !v.change && restarts_spent >= job_.max_restarts;
  if (v.failed && !v.change && !final_failure) ++restarts_spent;
  bool another = v.failed && !final_failure;
  log::info("{} {}: {}{}", join_->word(), j.g,
            !v.failed  ? std::string("every node succeeded")
            : v.change ? fmt::format("membership changed ({})", v.change_text)
                       : fmt::format("failed (exit code {})", v.code),
            another ? (v.change ? ", re-rendezvousing" : ", restarting") : "");
  agent_->post([this, v, final_failure, spent = restarts_spent](Supervisor& s) {
    verdict_ = v;
    final_round_ = !v.failed || final_failure;
    restarts_spent_ = spent;
    s.settle(v.failed, v.code);
    // Elastic: the supervisor would restart (rounds are not its restarts): end the job here.
    if (final_failure && !s.finished()) s.abort(v.code);
  });
  return another;
}

// --- The loop ---------------------------------------------------------------------------------

// The first failure of an attempt here: the first one anywhere wins the failed key and tells
// every node.
void NodeCoordinator::publish_failure(const WorkerState& w, const std::deque<std::string>& tail) {
  if (leaving_) return;  // Its workers end because it leaves; that is no failure of the job.
  if (job_.print_summary) {
    fmt::print(stderr, "mlrun: rank {} (pid {}) ended with {}; stopping the other workers\n",
               w.spec.rank, w.pid, describe_status(w.wait_status));
  }
  FailureRecord record{node_rank_,
                       job_.host,
                       w.spec.rank,
                       w.spec.local_rank,
                       w.pid,
                       describe_status(w.wait_status),
                       exit_code_from_status(w.wait_status),
                       format_time(w.ended_at),
                       std::vector<std::string>(tail.begin(), tail.end()),
                       hooks_.error_message ? hooks_.error_message(attempt_, w.spec.rank) : ""};
  std::string text = record.encode();
  try {
    if (control_.compare_set(key(attempt_, "failed"), "", text) == text) {
      for (int n = 0; n < nnodes_; ++n) control_.set(notify_key(attempt_, n), "fail");
    }
  } catch (const rdzv::Error& e) {
    cannot_report("tell the other nodes about the failure", e);
  }
}

// A failure or a result the others will never see (the server refused it: its memory cap, say)
// would leave every node, this one too, waiting for it for ever: the job is aborted instead,
// with the reason. An abort already under way, or a server gone, tells them without it.
void NodeCoordinator::cannot_report(std::string_view what, const rdzv::Error& e) {
  if (dynamic_cast<const rdzv::AbortedError*>(&e) != nullptr) return;  // the abort says why
  fmt::print(stderr, "mlrun: cannot {}: {}\n", what, e.what());
  if (dynamic_cast<const rdzv::ConnectionError*>(&e) != nullptr) return;
  publish_abort(fmt::format("{} could not {}: {}", self_name(), what, e.what()));
}

// This node's group of the attempt ended: its result, counted so that the last one settles.
void NodeCoordinator::report_result(const AttemptResult& r) {
  int code = r.first_failure ? exit_code_from_status(r.workers[*r.first_failure].wait_status)
                             : (r.failed() ? 1 : 0);
  result_written_ = true;
  // A node that left is lost to the others, who fill in its result.
  if (leaving_) return;
  try {
    // This node's coordinator first: it then waits for `settled` while the count goes on (no
    // node's result is the last one's critical path but for the count and `settled`).
    control_.compare_set(notify_key(attempt_, node_rank_), "", "end");
    std::string result = NodeResult{!r.failed(), code}.encode();
    // Elastic nodes read each node's result (ElasticJoin::settle); fixed-size ones the count.
    if (elastic_) control_.set(result_key(attempt_, node_rank_), result);
    // Before the count, so that whoever sees `settled` sees the failure too.
    if (r.failed()) control_.compare_set(key(attempt_, "first_bad"), "", result);
    std::int64_t count = control_.add(key(attempt_, "results"), result_delta(!r.failed()));
    if (all_results_in(count, nnodes_)) {
      control_.set(key(attempt_, "settled"), settled_value(count));
    }
  } catch (const rdzv::Error& e) {
    cannot_report("report its result", e);
  }
}

// An attempt ended and was settled: its failure summary, and what follows (the verdict says).
void NodeCoordinator::print_attempt_end(const AttemptResult& r, bool restarting,
                                        const std::vector<std::deque<std::string>>& tails) {
  if (!job_.print_summary) return;
  std::string summary;
  if (r.first_failure || r.interrupt_signal != 0) {
    SummaryContext context{
        fmt::format("node {} ({})", node_rank_, job_.host), [&](const WorkerState& w) {
          return hooks_.error_message ? hooks_.error_message(r.attempt, w.spec.rank)
                                      : std::string();
        }};
    summary = format_failure_summary(r, tails, context);
  } else if (!verdict_.record.empty() && verdict_.failed) {
    summary = format_record_summary(verdict_.record);
  }
  // The supervisor of an elastic job restarts after every settle; the verdict says what that
  // means (for a fixed-size job, restarting implies a restart was spent).
  if (aborting_ || !restarting || final_round_) {
    fmt::print(stderr, "{}", summary);
  } else if (verdict_.change) {
    fmt::print(stderr,
               "{}mlrun: membership changed in round {} ({}): every node re-rendezvouses; no "
               "restart spent ({} of {} restarts used)\n",
               summary, r.attempt, verdict_.change_text, restarts_spent_, job_.max_restarts);
  } else {
    fmt::print(stderr, "{}mlrun: restarting every node's workers ({} of {} restarts)\n", summary,
               restarts_spent_, job_.max_restarts);
  }
}

// SIGTERM to a node of an elastic job (a preempted machine): this node leaves, as torchrun's
// agent does; the others continue in a new round while at least MIN remain. The node that
// serves the rendezvous cannot leave: the job ends, as for any other stop signal.
void NodeCoordinator::leave_on_sigterm() {
  leaving_ = true;
  std::string why = fmt::format("it left the job on SIGTERM{}", job_.signal_note);
  try {
    control_.set(left_key(member_), why);
  } catch (const rdzv::Error&) {
    // The server is gone or the job aborted: nobody is left to tell.
  }
  // Closing the heartbeats' connection loses this node on the server at once. A node still
  // waiting for a round (it never had a rank) leaves that wait too: nothing else would end it
  // before join_timeout, and the others must not count it into their round. A node in a round
  // stops watching it: the others settle it without this node.
  beat_.reset();
  join_->interrupt();
  {
    std::lock_guard lock(watching_mutex_);
    if (watching_ != nullptr) watching_->interrupt();
  }
  if (job_.print_summary && node_rank_ < 0) {
    fmt::print(stderr,
               "mlrun: SIGTERM: this node ({}) leaves the elastic job before its first round; "
               "the other nodes' round forms without it\n",
               member_);
  } else if (job_.print_summary) {
    fmt::print(stderr,
               "mlrun: SIGTERM: this node ({}, node {}) leaves the elastic job; its workers "
               "stop, and the other nodes continue without it while at least {} remain\n",
               member_, node_rank_, job_.nnodes_min);
  }
}

// A stop signal here stops this node's workers (the supervisor) and, at once, every other
// node's: they must not wait for this node's grace period to end before they hear of it.
void NodeCoordinator::on_signal(int sig) {
  if (aborting_ || interrupt_published_) return;
  interrupt_published_ = true;
  if (elastic_ && sig == SIGTERM && !job_.serves_rendezvous && beat_) {
    leave_on_sigterm();
    return;
  }
  const char* abbrev = sigabbrev_np(sig);
  publish_abort(fmt::format("interrupted: SIG{} on {}{}", abbrev ? abbrev : "?", self_name(),
                            job_.signal_note));
}

// A forwarded signal here goes to the other nodes through the rendezvous (a head's).
void NodeCoordinator::on_forwarded_signal(int sig) {
  if (!job_.publish_signals || job_.nnodes <= 1) return;
  try {
    publish_signal(control_, sig, signal_origin_);
  } catch (const rdzv::Error& e) {
    fmt::print(stderr, "mlrun: cannot pass {} on to the other nodes: {}\n", signal_name(sig),
               e.what());
  }
}

}  // namespace mlrun::coordinator
