#include "launcher/node.h"

#include <utility>  // Boost 1.74's Asio headers use std::exchange without including it.

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <future>
#include <thread>

#include <fmt/format.h>
#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <mlrun/rendezvous.hpp>
#include <nlohmann/json.hpp>

#include "launcher/summary.h"
#include "worker/net.h"

namespace mlrun {
namespace {

namespace rdzv = mlrun::rendezvous;
using nlohmann::json;

// Keys of one attempt (generation) g. The attempt number is in every key, so no attempt ever
// sees another's state.
//   mlrun/G/master        "addr:port" of MASTER_ADDR/MASTER_PORT, set by node 0
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

// Waits for every node's result of attempt g and says whether the attempt failed, with the
// first failure's record when one was published.
Verdict settle_attempt(rdzv::Client& c, int g, int nnodes) {
  for (int n = 0; n < nnodes; ++n) get_eventually(c, key(g, fmt::format("result/{}", n)));
  if (auto record = c.try_get(key(g, "failed"))) return {true, record_code(*record), *record};
  for (int n = 0; n < nnodes; ++n) {
    json result = json::parse(c.get(key(g, fmt::format("result/{}", n))));
    if (!result.at("ok").get<bool>()) return {true, result.at("code").get<int>(), {}};
  }
  return {};
}

}  // namespace

int run_node(const NodeJob& job, const NodeHooks& hooks, Lifeline& lifeline, int lifeline_fd) {
  rdzv::ClientOptions client_options;
  client_options.job_id = job.job_id;
  client_options.timeout = job.join_timeout;
  // The loop's own connection: only quick requests (set, compare-and-set, abort), so the loop
  // never blocks on the rendezvous; everything that waits runs on the coordinator's thread.
  rdzv::Client control = rdzv::Client::connect(job.endpoint, job.token, client_options);

  boost::asio::io_context io;
  auto spawner = make_posix_spawner();
  Environment base = Environment::current();
  // Loop-thread state of the running attempt.
  int attempt = 0;
  int node_rank = job.node_rank;
  int nnodes = job.nnodes;
  bool aborting = false;
  std::string abort_message;

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
    try {
      control.set(key(attempt, fmt::format("result/{}", node_rank)),
                  json{{"ok", !r.failed()}, {"code", code}}.dump());
      control.compare_set(key(attempt, fmt::format("notify/{}", node_rank)), "", "end");
    } catch (const rdzv::Error& e) {
      fmt::print(stderr, "mlrun: cannot report node {}'s result: {}\n", node_rank, e.what());
    }
  };
  // The verdict's record, set on the loop before settle() so that on_attempt_end can print it.
  Verdict verdict;
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
    if (!aborting && restarting) {
      fmt::print(stderr, "{}mlrun: restarting every node's workers ({} of {} restarts)\n", summary,
                 r.attempt + 1, job.max_restarts);
    } else {
      fmt::print(stderr, "{}", summary);
    }
  };

  SupervisorConfig config{job.max_restarts, job.grace, /*settled_elsewhere=*/true};
  Agent agent(io, *spawner, lifeline, nullptr, config, callbacks);

  auto abort_here = [&agent, &aborting, &abort_message](std::string message, int code) {
    agent.post([&aborting, &abort_message, message, code](Supervisor& s) {
      aborting = true;
      abort_message = message;
      s.abort(code);
    });
  };

  // The coordinator: joins each attempt, waits for its end or a failure anywhere, and settles
  // it with every node's result. Only this thread blocks on the rendezvous.
  std::promise<void> coordinator_done;
  std::thread coordinator([&] {
    try {
      for (int g = 0;; ++g) {
        rdzv::ClientOptions options = client_options;
        options.generation = g;
        rdzv::Client c = rdzv::Client::connect(job.endpoint, job.token, options);
        rdzv::NodeAssignment a =
            c.join_node(job.nnodes, job.nproc, job.node_rank, job.join_timeout);
        std::string master;
        if (a.node_rank == 0) {
          std::string addr = job.master_addr;
          if (addr.empty()) {
            std::string host;
            int port;
            split_endpoint(job.endpoint, host, port);
            addr = local_address_toward(host);
          }
          master =
              fmt::format("{}:{}", addr, job.master_port != 0 ? job.master_port : free_tcp_port());
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
        auto colon = master.rfind(':');
        env.master_addr = master.substr(0, colon);
        env.master_port = std::stoi(master.substr(colon + 1));
        env.restart_count = g;
        env.rdzv_endpoint = job.endpoint;
        env.rdzv_token = job.token;
        std::vector<WorkerSpec> specs;
        for (int lr = 0; lr < job.nproc; ++lr) {
          int rank = a.rank_offset + lr;
          specs.push_back(WorkerSpec{
              rank, lr,
              SpawnRequest{
                  job.argv, worker_environment(base, env, lr, hooks.error_file(g, rank)), {}}});
        }
        agent.post([&, g, a, specs = std::move(specs)](Supervisor& s) mutable {
          attempt = g;
          node_rank = a.node_rank;
          nnodes = a.nnodes;
          s.begin_attempt(g, std::move(specs));
        });
        std::string note = get_eventually(c, key(g, fmt::format("notify/{}", a.node_rank)));
        if (note == "fail") {
          int code = record_code(c.get(key(g, "failed")));
          agent.post([code](Supervisor& s) { s.on_remote_failure(code); });
        }
        Verdict v = settle_attempt(c, g, a.nnodes);
        bool restart = v.failed && g < job.max_restarts;
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
  std::optional<boost::asio::posix::stream_descriptor> lifeline_stream;
  std::function<void()> watch_lifeline = [&] {
    lifeline_stream->async_wait(
        boost::asio::posix::stream_descriptor::wait_read, [&](const boost::system::error_code& ec) {
          if (ec) return;
          char buf[256];
          ssize_t n = ::read(lifeline_stream->native_handle(), buf, sizeof buf);
          if (n > 0 || (n < 0 && errno == EINTR)) return watch_lifeline();
          abort_here("the head's connection is gone", 1);
        });
  };
  if (lifeline_fd >= 0) {
    lifeline_stream.emplace(io, dup(lifeline_fd));
    watch_lifeline();
  }

  int code = agent.run();
  if (!aborting && code >= 128) {
    // A signal reached this launcher: tell every node.
    publish_abort(fmt::format("interrupted: {} on node {} ({})",
                              code == 130 ? "SIGINT" : fmt::format("signal {}", code - 128),
                              node_rank, job.host));
  } else if (aborting && abort_message.rfind("job aborted:", 0) != 0) {
    // This node gave up (its rendezvous failed, or its head is gone): tell every node.
    publish_abort(fmt::format("node {} ({}): {}", node_rank, job.host, abort_message));
  }
  if (aborting && job.print_summary) fmt::print(stderr, "mlrun: {}\n", abort_message);
  // The coordinator wakes from the abort or the verdict. A server that vanished without a
  // word would leave it blocked: give it a bound, then leave without it.
  if (coordinator_done.get_future().wait_for(std::chrono::seconds(10)) ==
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
  if (nnodes > 1 && node_rank >= 0) {
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
              int nnodes, int max_restarts, const std::function<void(const std::string&)>& abort) {
  // Signals go to a thread of their own, which aborts the job; this thread waits on the
  // rendezvous and so wakes with the abort.
  sigset_t signals, old;
  sigemptyset(&signals);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGUSR2}) sigaddset(&signals, sig);
  pthread_sigmask(SIG_BLOCK, &signals, &old);
  std::atomic<int> interrupted{0};
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    if (sig == SIGUSR2) return;  // The watch is over.
    interrupted = sig;
    abort(fmt::format("interrupted: {} on the head", sigabbrev_np(sig) ? sigabbrev_np(sig) : "?"));
  });
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
    code = interrupted != 0 ? 128 + interrupted : 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "mlrun: error: {}\n", e.what());
  }
  pthread_kill(waiter.native_handle(), SIGUSR2);
  waiter.join();
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  return code;
}

}  // namespace mlrun
