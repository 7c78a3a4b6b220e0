#include "coordinator/node.h"

#include <utility>  // Boost 1.74's Asio headers use std::exchange without including it.

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <future>
#include <mutex>
#include <random>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>
#include <mlrun/rendezvous.hpp>
#include <nlohmann/json.hpp>

#include "launcher/signal_relay.h"
#include "launcher/summary.h"
#include "worker/cgroup.h"
#include "worker/log.h"
#include "worker/net.h"

namespace mlrun {
namespace {

namespace rdzv = mlrun::rendezvous;
using nlohmann::json;

// Keys of one attempt (generation) g. The attempt number is in every key, so no attempt ever
// sees another's state.
//   mlrun/G/master        "addr:port" of MASTER_ADDR/MASTER_PORT, set by node 0: the rendezvous
//                         endpoint with --store mlrun, else a port free on node 0
//   mlrun/G/failed        the first failure's record (compare-and-set: the first one wins)
//   mlrun/G/notify/N      "fail" (a failure somewhere) or "end" (node N's group ended)
//   mlrun/G/result/N      node N's group ended: {"ok": bool, "code": int}
std::string key(int g, std::string_view name) {
  return fmt::format("mlrun/{}/{}", g, name);
}

// Waits for a key that is set when a training attempt ends, which can take days. Liveness is
// the connection's business (a lost server is a ConnectionError at once), so the bound here
// is renewed.
std::string get_eventually(rdzv::Client& c, const std::string& k) {
  while (true) {
    try {
      return c.get(k, std::chrono::hours(1));
    } catch (const rdzv::TimeoutError&) {
    }
  }
}

int record_code(const std::string& record) {
  try {
    return json::parse(record).at("code").get<int>();
  } catch (...) {
    return 1;
  }
}

// Whatever the coordinator thread learned, for the loop's thread.
struct Verdict {
  bool failed = false;
  int code = 0;
  std::string record;
};

// Waits until every node's result of attempt g is in and says whether the attempt failed, with
// the first failure's record when one was published. Each node counts its result into one
// counter (on_attempt_ended), and the last one sets `settled`: one wait per node, where reading
// every node's result from every node was N^2 requests (43 s at 1,024 nodes, docs/scale.md).
Verdict settle_attempt(rdzv::Client& c, int g, int /*nnodes*/) {
  get_eventually(c, key(g, "settled"));
  if (auto record = c.try_get(key(g, "failed"))) return {true, record_code(*record), *record};
  if (auto bad = c.try_get(key(g, "first_bad"))) return {true, record_code(*bad), {}};
  return {};
}

// Elastic jobs: the server's membership rounds of this group (docs/protocol.md). The server
// writes `mlrun/elastic/nodes/R/change` when a node joins or is lost while round R runs.
constexpr std::string_view kElasticGroup = "mlrun/elastic/nodes";

std::string change_key(int round) {
  return fmt::format("{}/{}/change", kElasticGroup, round);
}

// "host#1a2b3c4d": this node's identity across rounds, new for every mlrun process.
std::string make_member_id(const std::string& host) {
  std::random_device rd;
  return fmt::format("{}#{:08x}", host.empty() ? host_name() : host, rd());
}

// "node 1 (host2#ab) lost: why; last heard from at 12:00:03 (31.0 s ago)", one per lost node.
std::string describe_lost(const json& change) {
  std::string out;
  for (const auto& l : change.value("lost", json::array())) {
    out += fmt::format("{}node {} ({}) lost: {}; last heard from at {} ({:.1f} s ago)",
                       out.empty() ? "" : "; ", l.value("node", -1), l.value("member", "?"),
                       l.value("why", "?"), l.value("last_heard", "?"), l.value("silent_s", 0.0));
  }
  return out;
}

// A node that leaves an elastic job on SIGTERM says so here before it goes, so that its peers
// name the cause instead of "its connection to the rendezvous closed".
std::string left_key(const std::string& member) {
  return fmt::format("mlrun/elastic/left/{}", member);
}

// The lost members' causes, where they left on their own (left_key).
void add_leave_causes(rdzv::Client& c, json& change) {
  if (!change.is_object() || !change.contains("lost")) return;
  for (auto& l : change["lost"]) {
    if (!l.is_object()) continue;
    if (auto why = c.try_get(left_key(l.value("member", "")))) l["why"] = *why;
  }
}

std::string describe_change(const json& change) {
  std::string out = describe_lost(change);
  for (const auto& j : change.value("joined", json::array())) {
    out += fmt::format("{}{} is waiting to join", out.empty() ? "" : "; ", j.get<std::string>());
  }
  return out;
}

// The verdict on an elastic round: success, a membership change (no restart spent), or a
// failure. Every node computes the same one from the same keys.
struct ElasticVerdict {
  Verdict verdict;
  bool change = false;
  std::string change_text;
};

ElasticVerdict settle_round(rdzv::Client& c, int g, int nnodes) {
  ElasticVerdict v;
  bool all_ok = true;
  std::optional<int> first_code;
  for (int n = 0; n < nnodes; ++n) {
    json result = json::parse(get_eventually(c, key(g, fmt::format("result/{}", n))));
    if (result.value("lost", false)) continue;  // A lost node's result was filled in for it.
    if (!result.at("ok").get<bool>()) {
      all_ok = false;
      if (!first_code) first_code = result.at("code").get<int>();
    }
  }
  // Every node still here finished its workers: the job is done, whoever was lost or waits.
  if (all_ok) return v;
  auto failed = c.try_get(key(g, "failed"));
  auto changed = c.try_get(key(g, "changed"));
  bool lost = false;
  json change;
  if (changed) {
    change = json::parse(*changed, nullptr, false);
    lost = change.is_object() && !change.value("lost", json::array()).empty();
    add_leave_causes(c, change);
  }
  v.verdict.failed = true;
  v.verdict.code = failed ? record_code(*failed) : first_code.value_or(1);
  if (failed) v.verdict.record = *failed;
  // A membership change stops every node without spending a restart; so does a failure in a
  // round that lost a node (its peers' errors are the loss's).
  if (changed && (lost || !failed)) {
    v.change = true;
    v.change_text = change.is_object() ? describe_change(change) : *changed;
  }
  return v;
}

}  // namespace

std::vector<std::string> parse_rdzv_conf(const std::string& text, RdzvConf& conf) {
  std::vector<std::string> errors;
  std::size_t start = 0;
  while (start <= text.size() && !text.empty()) {
    std::size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(start, end - start);
    start = end + 1;
    if (item.empty()) {
      if (end >= text.size()) break;
      continue;
    }
    auto eq = item.find('=');
    if (eq == std::string::npos) {
      errors.push_back(fmt::format("--rdzv_conf: '{}' is not key=value", item));
      continue;
    }
    std::string name = item.substr(0, eq), value = item.substr(eq + 1);
    std::chrono::milliseconds* target = name == "join_timeout"         ? &conf.join_timeout
                                        : name == "last_call_timeout"  ? &conf.last_call
                                        : name == "heartbeat_interval" ? &conf.heartbeat_interval
                                        : name == "heartbeat_timeout"  ? &conf.heartbeat_timeout
                                                                       : nullptr;
    if (target == nullptr) continue;  // torchrun's other keys: accepted, not used.
    double seconds = -1;
    try {
      std::size_t used = 0;
      seconds = std::stod(value, &used);
      if (used != value.size()) seconds = -1;
    } catch (const std::exception&) {
    }
    bool zero_ok = name == "last_call_timeout";
    if (!(seconds > 0 || (zero_ok && seconds == 0)) || seconds > 4e6) {
      errors.push_back(fmt::format("--rdzv_conf {}={}: not a number of seconds{}", name, value,
                                   zero_ok ? " (0 or more)" : " above 0"));
      continue;
    }
    *target = std::chrono::milliseconds(static_cast<std::int64_t>(seconds * 1000));
  }
  if (errors.empty() && conf.heartbeat_timeout <= conf.heartbeat_interval) {
    errors.push_back(fmt::format(
        "--rdzv_conf: heartbeat_timeout ({} ms) must be longer than heartbeat_interval ({} ms)",
        conf.heartbeat_timeout.count(), conf.heartbeat_interval.count()));
  }
  return errors;
}

int run_node(const NodeJob& job, const NodeHooks& hooks, Lifeline& lifeline, int lifeline_fd) {
  rdzv::ClientOptions client_options;
  client_options.job_id = job.job_id;
  client_options.timeout = job.join_timeout;
  // The loop's own connection: only quick requests (set, compare-and-set, abort), so the loop
  // never blocks on the rendezvous; everything that waits runs on the coordinator's thread.
  rdzv::Client control = rdzv::Client::connect(job.endpoint, job.token, client_options);
  // Heartbeats, in every multi-node job. They go on a connection of their own whose every
  // request is bounded by heartbeat_timeout (a cut link must not stall the loop longer than it
  // takes the others to give up on this node), sent from a timer on the event loop, so a node
  // whose loop stops (SIGSTOP, D state) stops them while its connections stay open.
  // Elastic: they keep this node in the rounds, and the connection is the node's lifeline on
  // the server (its close loses the node at once). Fixed-size: node heartbeats, from the first
  // join on; the server aborts the job naming a node silent for heartbeat_timeout.
  const bool elastic = job.elastic();
  const std::string member = elastic ? make_member_id(job.host) : std::string();
  std::optional<rdzv::Client> beat;
  if (job.nnodes > 1) {
    rdzv::ClientOptions beat_options = client_options;
    beat_options.timeout = job.heartbeat_timeout;
    beat.emplace(rdzv::Client::connect(job.endpoint, job.token, beat_options));
    if (elastic) beat->heartbeat(kElasticGroup, member);
  }

  boost::asio::io_context io;
  // Teardown reaches what leaves the workers' process groups where the machine allows a cgroup
  // (docs/launcher.md, Teardown); it outlives the spawner and the agent below.
  std::unique_ptr<JobCgroup> cgroup = make_node_cgroup(job.job_id, lifeline);
  auto spawner = make_posix_spawner(cgroup.get());
  Environment base = Environment::current();
  // Loop-thread state of the running attempt.
  int attempt = 0;
  int node_rank = job.node_rank;
  int nnodes = job.nnodes;
  bool aborting = false;
  std::string abort_message;
  // Elastic, on the loop: the round whose change key is watched, whether this node's result
  // of it is out (after that, the verdict decides), whether its change was acted on, lost
  // nodes whose results were filled in, and whether this node lost the rendezvous itself.
  int active_round = -1;
  bool result_written = false;
  bool change_handled = false;
  std::set<int> lost_filled;
  bool lost_here = false;
  // A signal reached this launcher and the job's abort for it went out (on the loop).
  bool interrupt_published = false;
  // Fixed-size, on the loop: this node's name in its heartbeats ("node 1 (host2)"), known once
  // it joined; empty before, and after a server that has no node heartbeats refused one.
  std::string beat_name;
  bool node_beats_work = false;  // One node heartbeat was answered.
  // Elastic: SIGTERM made this node leave the job (set on the loop, read by the coordinator).
  std::atomic<bool> leaving{false};

  auto publish_abort = [&](const std::string& reason) {
    try {
      control.abort(reason);
    } catch (const rdzv::Error&) {
      // Already aborted, or the server is gone: either way the others learn of it.
    }
  };

  AgentCallbacks callbacks;
  callbacks.routes = hooks.routes;
  callbacks.on_first_failure = [&](const WorkerState& w, const std::deque<std::string>& tail) {
    if (leaving) return;  // Its workers end because it leaves; that is no failure of the job.
    if (job.print_summary) {
      fmt::print(stderr, "mlrun: rank {} (pid {}) ended with {}; stopping the other workers\n",
                 w.spec.rank, w.pid, describe_status(w.wait_status));
    }
    json record = {{"node", node_rank},
                   {"host", job.host},
                   {"rank", w.spec.rank},
                   {"local_rank", w.spec.local_rank},
                   {"pid", w.pid},
                   {"status", describe_status(w.wait_status)},
                   {"code", exit_code_from_status(w.wait_status)},
                   {"time", format_time(w.ended_at)},
                   {"tail", std::vector<std::string>(tail.begin(), tail.end())}};
    if (hooks.error_message) {
      std::string m = hooks.error_message(attempt, w.spec.rank);
      if (!m.empty()) record["error"] = m;
    }
    std::string text = record.dump();
    try {
      if (control.compare_set(key(attempt, "failed"), "", text) == text) {
        for (int n = 0; n < nnodes; ++n)
          control.set(key(attempt, fmt::format("notify/{}", n)), "fail");
      }
    } catch (const rdzv::Error& e) {
      fmt::print(stderr, "mlrun: cannot tell the other nodes about the failure: {}\n", e.what());
    }
  };
  callbacks.on_attempt_ended = [&](const AttemptResult& r, const auto&) {
    int code = r.first_failure ? exit_code_from_status(r.workers[*r.first_failure].wait_status)
                               : (r.failed() ? 1 : 0);
    result_written = true;
    // A node that left is lost to the others, who fill in its result.
    if (leaving) return;
    try {
      std::string result = json{{"ok", !r.failed()}, {"code", code}}.dump();
      control.set(key(attempt, fmt::format("result/{}", node_rank)), result);
      // Before the count, so that whoever sees `settled` sees the failure too.
      if (r.failed()) control.compare_set(key(attempt, "first_bad"), "", result);
      if (control.add(key(attempt, "results"), 1) == nnodes) {
        control.set(key(attempt, "settled"), "1");
      }
      control.compare_set(key(attempt, fmt::format("notify/{}", node_rank)), "", "end");
    } catch (const rdzv::Error& e) {
      fmt::print(stderr, "mlrun: cannot report node {}'s result: {}\n", node_rank, e.what());
    }
  };
  // The verdict's record, set on the loop before settle() so that on_attempt_end can print it.
  Verdict verdict;
  // Elastic: what the verdict means for the next round, and the restarts spent so far.
  ElasticVerdict elastic_verdict;
  bool final_round = false;
  int restarts_spent = 0;
  callbacks.on_attempt_end = [&](const AttemptResult& r, bool restarting,
                                 const std::vector<std::deque<std::string>>& tails) {
    if (!job.print_summary) return;
    std::string summary;
    if (r.first_failure || r.interrupt_signal != 0) {
      SummaryContext context{
          fmt::format("node {} ({})", node_rank, job.host), [&](const WorkerState& w) {
            return hooks.error_message ? hooks.error_message(r.attempt, w.spec.rank)
                                       : std::string();
          }};
      summary = format_failure_summary(r, tails, context);
    } else if (!verdict.record.empty() && verdict.failed) {
      summary = format_record_summary(verdict.record);
    }
    if (elastic) {
      // The supervisor restarts after every settle; the verdict says what that means.
      if (aborting || !restarting || final_round) {
        fmt::print(stderr, "{}", summary);
      } else if (elastic_verdict.change) {
        fmt::print(stderr,
                   "{}mlrun: membership changed in round {} ({}): every node re-rendezvouses; no "
                   "restart spent ({} of {} restarts used)\n",
                   summary, r.attempt, elastic_verdict.change_text, restarts_spent,
                   job.max_restarts);
      } else {
        fmt::print(stderr, "{}mlrun: restarting every node's workers ({} of {} restarts)\n",
                   summary, restarts_spent, job.max_restarts);
      }
    } else if (!aborting && restarting) {
      fmt::print(stderr, "{}mlrun: restarting every node's workers ({} of {} restarts)\n", summary,
                 r.attempt + 1, job.max_restarts);
    } else {
      fmt::print(stderr, "{}", summary);
    }
  };

  // A signal here stops this node's workers (the supervisor) and, at once, every other node's:
  // they must not wait for this node's grace period to end before they hear of it.
  callbacks.on_signal = [&](int sig) {
    if (aborting || interrupt_published) return;
    interrupt_published = true;
    const char* abbrev = sigabbrev_np(sig);
    // SIGTERM to a node of an elastic job (a preempted machine): this node leaves, as
    // torchrun's agent does; the others continue in a new round while at least MIN remain.
    // The node that serves the rendezvous cannot leave: the job ends, as below.
    if (elastic && sig == SIGTERM && !job.serves_rendezvous && beat) {
      leaving = true;
      std::string why = fmt::format("it left the job on SIGTERM{}", job.signal_note);
      try {
        control.set(left_key(member), why);
      } catch (const rdzv::Error&) {
        // The server is gone or the job aborted: nobody is left to tell.
      }
      // Closing the heartbeats' connection loses this node on the server at once.
      beat.reset();
      if (job.print_summary) {
        fmt::print(stderr,
                   "mlrun: SIGTERM: this node ({}, node {}) leaves the elastic job; its workers "
                   "stop, and the other nodes continue without it while at least {} remain\n",
                   member, node_rank, job.nnodes_min);
      }
      return;
    }
    publish_abort(fmt::format("interrupted: SIG{} on node {} ({}){}", abbrev ? abbrev : "?",
                              node_rank, job.host, job.signal_note));
  };

  // Elastic: rounds are not restarts; the coordinator counts restarts and ends the job itself.
  SupervisorConfig config{elastic ? INT_MAX : job.max_restarts, job.grace,
                          /*settled_elsewhere=*/true};
  // A forwarded signal here goes to the other nodes through the rendezvous (a head's), and the
  // head's come back to this node's workers (a node it started).
  const std::string signal_origin = make_signal_origin();
  callbacks.on_forwarded_signal = [&](int sig) {
    if (!job.publish_signals || job.nnodes <= 1) return;
    try {
      publish_signal(control, sig, signal_origin);
    } catch (const rdzv::Error& e) {
      fmt::print(stderr, "mlrun: cannot pass {} on to the other nodes: {}\n", signal_name(sig),
                 e.what());
    }
  };
  Agent agent(io, *spawner, lifeline, nullptr, config, callbacks, job.signals);
  std::optional<SignalWatcher> signal_watcher;
  if (job.watch_signals && job.nnodes > 1) {
    signal_watcher.emplace(job.endpoint, job.token, job.job_id, signal_origin, [&agent](int sig) {
      agent.post([sig](Supervisor& s) { s.forward_signal(sig); });
    });
  }

  auto abort_here = [&](std::string message, int code) {
    agent.post([&aborting, &abort_message, &interrupt_published, message, code](Supervisor& s) {
      // The abort this node published for its own signal comes back: the signal already stops
      // the workers, and its exit code (128 + the signal) stands.
      if (interrupt_published) return;
      aborting = true;
      abort_message = message;
      s.abort(code);
    });
  };

  // Fixed-size: one node heartbeat, on the loop (set below, with the other timers).
  std::function<void()> send_node_beat;

  // The coordinator: joins each attempt, waits for its end or a failure anywhere, and settles
  // it with every node's result. Only this thread blocks on the rendezvous.
  std::promise<void> coordinator_done;
  // Builds this node's workers of attempt g (restart_count: TORCHELASTIC_RESTART_COUNT).
  auto make_specs = [&](rdzv::Client& c, int g, const rdzv::NodeAssignment& a, int restart_count) {
    std::string master;
    if (a.node_rank == 0 && job.env.agent_store) {
      // The rendezvous server is the TCPStore (docs/torch-store.md): a fresh key space for this
      // attempt before any of its workers starts (the others wait for the master key below).
      c.set(std::string(rdzv::kTorchStoreGenerationKey), std::to_string(g));
      master = job.endpoint;
      c.set(key(g, "master"), master);
    } else if (a.node_rank == 0) {
      std::string addr = job.master_addr;
      if (addr.empty()) {
        std::string host;
        int port;
        split_endpoint(job.endpoint, host, port);
        addr = local_address_toward(host);
      }
      master = fmt::format("{}:{}", addr, job.master_port != 0 ? job.master_port : free_tcp_port());
      c.set(key(g, "master"), master);
    } else {
      master = c.get(key(g, "master"), job.join_timeout);
    }
    GroupEnv env = job.env;
    env.node_rank = a.node_rank;
    env.nnodes = a.nnodes;
    env.rank_offset = a.rank_offset;
    env.local_world_size = job.nproc;
    env.world_size = a.world_size;
    if (!split_endpoint(master, env.master_addr, env.master_port)) {
      throw std::runtime_error(fmt::format("bad master address {} from node 0", master));
    }
    env.restart_count = restart_count;
    env.rdzv_endpoint = job.endpoint;
    env.rdzv_token = job.token;
    // The round scopes the rendezvous client's keys (Client::from_env), so a round that is not
    // a restart still never sees an earlier round's barriers, NCCL IDs or GlooStore keys.
    if (elastic) env.overrides.emplace_back("MLRUN_RDZV_ROUND", std::to_string(g));
    std::vector<WorkerSpec> specs;
    for (int lr = 0; lr < job.nproc; ++lr) {
      int rank = a.rank_offset + lr;
      specs.push_back(
          WorkerSpec{rank, lr,
                     SpawnRequest{job.argv,
                                  worker_environment(base, env, lr, hooks.error_file(g, rank)),
                                  {},
                                  job.stdin_to_rank0 && rank == 0 ? STDIN_FILENO : -1}});
      if (lr < static_cast<int>(job.numa.size())) {
        specs.back().request.cpus = job.numa[lr].cpus;
        specs.back().request.mem_nodes = job.numa[lr].mem_nodes;
      }
    }
    return specs;
  };

  // The elastic coordinator: each round is joined through the server's membership rounds; its
  // number is the attempt (g) that scopes every key. A failure spends a restart; a membership
  // change (a node joined or was lost) does not.
  auto run_elastic = [&] {
    int spent = 0;  // Restarts spent: this thread's count (the loop's copy is restarts_spent).
    while (!leaving) {
      rdzv::Client c = rdzv::Client::connect(job.endpoint, job.token, client_options);
      rdzv::ElasticJoinOptions eo;
      eo.min_nodes = job.nnodes_min;
      eo.max_nodes = job.nnodes;
      eo.local_world_size = job.nproc;
      eo.member = member;
      eo.preferred_rank = job.node_rank;
      eo.last_call = job.last_call;
      eo.heartbeat_timeout = job.heartbeat_timeout;
      eo.timeout = job.join_timeout;
      auto joining = std::chrono::steady_clock::now();
      log::debug("joining an elastic round at {} as {}", job.endpoint, member);
      rdzv::ElasticAssignment ea = c.join_elastic(kElasticGroup, eo);
      const int g = ea.round;
      const rdzv::NodeAssignment a = ea.node;
      log::info(
          "round {}: ranks joined {}/{} ({} node{}) in {:.2f} s; this is node {}, ranks {}-{}", g,
          a.world_size, a.world_size, a.nnodes, a.nnodes == 1 ? "" : "s", log::since(joining),
          a.node_rank, a.rank_offset, a.rank_offset + job.nproc - 1);
      std::vector<WorkerSpec> specs = make_specs(c, g, a, spent);
      std::string round_note = fmt::format(
          "mlrun: round {}: {} node{} ({}), world size {}; this node ({}) is node {}, "
          "{} of {} restarts used\n",
          g, a.nnodes, a.nnodes == 1 ? "" : "s", fmt::join(ea.members, ", "), a.world_size, member,
          a.node_rank, spent, job.max_restarts);
      agent.post([&, g, a, round_note, specs = std::move(specs)](Supervisor& s) mutable {
        if (job.print_summary) fmt::print(stderr, "{}", round_note);
        attempt = g;
        node_rank = a.node_rank;
        nnodes = a.nnodes;
        active_round = g;
        result_written = false;
        change_handled = false;
        lost_filled.clear();
        s.begin_attempt(g, std::move(specs));
      });
      std::string note = get_eventually(c, key(g, fmt::format("notify/{}", a.node_rank)));
      if (note == "fail") {
        int code = record_code(c.get(key(g, "failed")));
        agent.post([code](Supervisor& s) { s.on_remote_failure(code); });
      } else if (note == "change") {
        agent.post([](Supervisor& s) { s.on_remote_failure(1); });
      }
      ElasticVerdict v = settle_round(c, g, a.nnodes);
      bool final_failure = v.verdict.failed && !v.change && spent >= job.max_restarts;
      if (v.verdict.failed && !v.change && !final_failure) ++spent;
      agent.post([&, v, final_failure, spent](Supervisor& s) {
        verdict = v.verdict;
        elastic_verdict = v;
        final_round = !v.verdict.failed || final_failure;
        restarts_spent = spent;
        s.settle(v.verdict.failed, v.verdict.code);
        // The supervisor would restart (rounds are not its restarts): end the job here.
        if (final_failure && !s.finished()) s.abort(v.verdict.code);
      });
      if (!v.verdict.failed || final_failure) break;
    }
  };

  std::thread coordinator([&] {
    try {
      if (elastic) {
        run_elastic();
        coordinator_done.set_value();
        return;
      }
      for (int g = 0;; ++g) {
        rdzv::ClientOptions options = client_options;
        options.generation = g;
        auto joining = std::chrono::steady_clock::now();
        log::debug("attempt {}: joining the rendezvous at {} with {} worker{}", g, job.endpoint,
                   job.nproc, job.nproc == 1 ? "" : "s");
        rdzv::Client c = rdzv::Client::connect(job.endpoint, job.token, options);
        rdzv::NodeAssignment a =
            c.join_node(job.nnodes, job.nproc, job.node_rank, job.join_timeout);
        // join_node returns once every node has joined: every rank of the attempt is known.
        log::info(
            "attempt {}: ranks joined {}/{} ({} node{}) in {:.2f} s; this is node {}, ranks {}-{}",
            g, a.world_size, a.world_size, a.nnodes, a.nnodes == 1 ? "" : "s", log::since(joining),
            a.node_rank, a.rank_offset, a.rank_offset + job.nproc - 1);
        std::vector<WorkerSpec> specs = make_specs(c, g, a, g);
        agent.post([&, g, a, specs = std::move(specs)](Supervisor& s) mutable {
          attempt = g;
          node_rank = a.node_rank;
          nnodes = a.nnodes;
          if (beat && g == 0) {
            // The server watches this node from its first heartbeat: before its workers start,
            // so that a node that hangs at any time after is noticed.
            beat_name = fmt::format("node {} ({})", a.node_rank, job.host);
            send_node_beat();
          }
          s.begin_attempt(g, std::move(specs));
        });
        std::string note = get_eventually(c, key(g, fmt::format("notify/{}", a.node_rank)));
        if (note == "fail") {
          int code = record_code(c.get(key(g, "failed")));
          agent.post([code](Supervisor& s) { s.on_remote_failure(code); });
        }
        Verdict v = settle_attempt(c, g, a.nnodes);
        bool restart = v.failed && g < job.max_restarts;
        log::info("attempt {}: {}{}", g,
                  v.failed ? fmt::format("failed (exit code {})", v.code) : "every node succeeded",
                  restart ? ", restarting" : "");
        agent.post([&verdict, v](Supervisor& s) {
          verdict = v;
          s.settle(v.failed, v.code);
        });
        if (!restart) break;
      }
    } catch (const rdzv::AbortedError& e) {
      bool interrupted = e.detail().rfind("interrupted", 0) == 0;
      abort_here(fmt::format("job aborted: {}", e.detail()), interrupted ? 130 : 1);
    } catch (const std::exception& e) {
      abort_here(e.what(), 1);
    }
    coordinator_done.set_value();
  });

  // The head's lifeline (an agent's stdin): end-of-file means the head is gone.
  bool parent_gone = false;
  std::optional<boost::asio::posix::stream_descriptor> lifeline_stream;
  std::function<void()> watch_lifeline = [&] {
    lifeline_stream->async_wait(
        boost::asio::posix::stream_descriptor::wait_read, [&](const boost::system::error_code& ec) {
          if (ec) return;
          char buf[256];
          ssize_t n = ::read(lifeline_stream->native_handle(), buf, sizeof buf);
          if (n > 0 || (n < 0 && errno == EINTR)) return watch_lifeline();
          parent_gone = true;
          abort_here(
              job.tree_parent.empty()
                  ? std::string("the head's connection is gone")
                  : fmt::format("the connection of {}, its parent in the launch tree, is gone",
                                job.tree_parent),
              1);
        });
  };
  if (lifeline_fd >= 0) {
    lifeline_stream.emplace(io, dup(lifeline_fd));
    watch_lifeline();
  }

  // Every tick, a heartbeat when one is due and, elastic, a look at the running round's change
  // key (quick requests only). A change stops every node's workers for a new round, unless it
  // leaves fewer than the minimum, which ends the job.
  boost::asio::steady_timer tick(io);
  auto last_beat = std::chrono::steady_clock::now();
  // One heartbeat of a fixed-size node. A server older than protocol 1.2 refuses the op: the
  // job runs without, and says so once. A lost server ends this node, as an elastic one.
  send_node_beat = [&] {
    try {
      beat->node_heartbeat(beat_name, job.heartbeat_timeout);
      if (!node_beats_work) {
        log::debug("heartbeats as {} every {} ms; the server ends the job after {} ms without",
                   beat_name, job.heartbeat_interval.count(), job.heartbeat_timeout.count());
      }
      node_beats_work = true;
    } catch (const rdzv::AbortedError&) {
      // The coordinator wakes with the abort too and ends this node.
    } catch (const rdzv::Error& e) {
      if (!node_beats_work && dynamic_cast<const rdzv::ConnectionError*>(&e) == nullptr) {
        fmt::print(stderr,
                   "mlrun: warning: node {}: the rendezvous server at {} has no node heartbeats "
                   "(protocol 1.2; {}): a hung node will not be noticed\n",
                   node_rank, job.endpoint, e.what());
        beat_name.clear();
        return;
      }
      lost_here = true;
      abort_here(fmt::format("this node lost the rendezvous at {}: {}", job.endpoint, e.what()), 1);
    }
  };
  const auto tick_every =
      std::min<std::chrono::milliseconds>(job.heartbeat_interval, std::chrono::milliseconds(1000));
  auto check_change = [&] {
    const int g = active_round;
    auto text = control.try_get(change_key(g));
    if (!text) return;
    json change = json::parse(*text, nullptr, false);
    if (!change.is_object()) return;
    add_leave_causes(control, change);
    // A lost node reports nothing: its result is filled in, so that every node can settle.
    for (const auto& l : change.value("lost", json::array())) {
      int n = l.value("node", -1);
      if (n < 0 || !lost_filled.insert(n).second) continue;
      control.compare_set(key(g, fmt::format("result/{}", n)), "",
                          json{{"ok", false}, {"code", 1}, {"lost", true}}.dump());
    }
    // Once this node's result is out, the verdict decides (every node the same way).
    if (change_handled || result_written) return;
    change_handled = true;
    int alive = change.value("alive", 0);
    if (!change.value("lost", json::array()).empty() && alive < job.nnodes_min) {
      publish_abort(fmt::format("{}; {} node{} left, fewer than the minimum of --nnodes={}:{}",
                                describe_lost(change), alive, alive == 1 ? "" : "s", job.nnodes_min,
                                job.nnodes));
      return;
    }
    if (control.compare_set(key(g, "changed"), "", *text) != *text) return;
    for (int n = 0; n < nnodes; ++n) {
      control.compare_set(key(g, fmt::format("notify/{}", n)), "", "change");
    }
  };
  std::function<void()> arm_tick = [&] {
    tick.expires_after(tick_every);
    tick.async_wait([&](const boost::system::error_code& ec) {
      if (ec || lost_here || leaving) return;
      try {
        auto now = std::chrono::steady_clock::now();
        if (elastic && now - last_beat >= job.heartbeat_interval) {
          last_beat = now;
          beat->heartbeat(kElasticGroup, member);
        } else if (!elastic && !beat_name.empty() && now - last_beat >= job.heartbeat_interval) {
          last_beat = now;
          send_node_beat();
          if (lost_here) return;
        }
      } catch (const rdzv::AbortedError&) {
        // The coordinator wakes with the abort too and ends this node.
      } catch (const rdzv::Error& e) {
        lost_here = true;
        abort_here(fmt::format("this node lost the rendezvous at {}: {}", job.endpoint, e.what()),
                   1);
        return;
      }
      try {
        if (active_round >= 0) check_change();
      } catch (const rdzv::Error&) {
        // The heartbeat or the coordinator reports a lost server.
      }
      arm_tick();
    });
  };
  if (beat) arm_tick();

  int code = agent.run();
  tick.cancel();
  // Fixed-size: this node is done, not hung; closing the heartbeats' connection ends the
  // server's watch over it (the node may wait below for the others a while).
  if (!elastic) beat.reset();
  if (signal_watcher) signal_watcher->stop(&control, std::chrono::seconds(2));
  auto coordinator_finished = coordinator_done.get_future();
  if (parent_gone && !job.tree_parent.empty()) {
    // The parent's own parent reports its loss, naming every agent that went with it: that is
    // the job's reason, and this node's word only follows it (or stands in for it, after a bound).
    coordinator_finished.wait_for(std::chrono::seconds(5));
  }
  if (aborting && !lost_here && abort_message.rfind("job aborted:", 0) != 0) {
    // This node gave up (its rendezvous failed, or its head is gone): tell every node.
    publish_abort(fmt::format("node {} ({}): {}", node_rank, job.host, abort_message));
  }
  if (aborting && job.print_summary) fmt::print(stderr, "mlrun: {}\n", abort_message);
  // The coordinator wakes from the abort or the verdict. A server that vanished without a
  // word would leave it blocked: give it a bound, then leave without it.
  // A node that left waits for nobody: the others settle the round without it.
  if (coordinator_finished.wait_for(std::chrono::seconds(leaving ? 1 : 10)) ==
      std::future_status::ready) {
    coordinator.join();
  } else {
    std::fflush(nullptr);
    std::_Exit(code);
  }
  // No node leaves before every node is done with the rendezvous: the node that serves it
  // (node 0, or the endpoint's owner) would otherwise take it down while another node still
  // reports its result. Bounded, so a node that is gone holds nobody; an aborted job fails at
  // once.
  if (nnodes > 1 && node_rank >= 0 && !leaving) {
    try {
      control.set(fmt::format("mlrun/done/{}", node_rank), "1");
      std::vector<std::string> done;
      for (int n = 0; n < nnodes; ++n) done.push_back(fmt::format("mlrun/done/{}", n));
      control.wait(done, std::chrono::seconds(10));
    } catch (const std::exception&) {
    }
  }
  return code;
}

int watch_job(const std::string& endpoint, const std::string& token, const std::string& job_id,
              int nnodes, int max_restarts, const HeadSignals& signals) {
  // A signal aborts the job (signals' callback); this thread waits on the rendezvous and so
  // wakes with the abort.
  int code = 1;
  try {
    rdzv::ClientOptions options;
    options.job_id = job_id;
    for (int g = 0;; ++g) {
      options.generation = g;
      rdzv::Client c = rdzv::Client::connect(endpoint, token, options);
      Verdict v = settle_attempt(c, g, nnodes);
      if (v.failed) fmt::print(stderr, "{}", format_record_summary(v.record));
      if (v.failed && g < max_restarts) {
        fmt::print(stderr, "mlrun: restarting every node's workers ({} of {} restarts)\n", g + 1,
                   max_restarts);
        continue;
      }
      code = v.failed ? v.code : 0;
      break;
    }
  } catch (const rdzv::AbortedError& e) {
    fmt::print(stderr, "mlrun: job aborted: {}\n", e.detail());
    code = signals.signal() != 0 ? 128 + signals.signal() : 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "mlrun: error: {}\n", e.what());
  }
  return code;
}

}  // namespace mlrun
