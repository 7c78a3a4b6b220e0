#include "launcher/agent_command.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <mlrun/rendezvous.hpp>

#include <fmt/format.h>

#include "launcher/this_node.h"
#include "transport/agent_job.h"
#include "transport/slurm.h"
#include "transport/slurm_env.h"
#include "transport/ssh_session.h"
#include "transport/tree_agent.h"
#include "worker/hardware.h"
#include "worker/log.h"
#include "worker/net.h"
#include "worker/output.h"
#include "worker/signals.h"

namespace mlrun {
namespace {

// A node that cannot start (its log directory, its run directory) tells every node at once.
// Otherwise they wait for its join until the head, kLostGrace after this agent's exit, calls
// it lost (launcher/head.cc), or, through srun, until the join's timeout.
void abort_job(const NodeJob& job, const std::string& host, const std::string& why) {
  try {
    rendezvous::ClientOptions options;
    options.job_id = job.job_id;
    options.connect_timeout = std::chrono::seconds(5);
    options.timeout = std::chrono::seconds(5);
    rendezvous::Client::connect(job.endpoint, job.token, options)
        .abort(fmt::format("node {} ({}) cannot start: {}", job.node_rank, host, why));
  } catch (const std::exception& e) {
    log::debug("cannot abort the job at {}: {}", job.endpoint, e.what());
  }
}

// An agent whose plan failed: 2, and the others hear why now, as from a torchrun-style node
// (launcher/run.cc), not when the head calls this agent lost. Every cause is this host's own:
// its program or a file missing here (node_errors), or, since the head planned the same command
// line without an error, its mlrun (another version's, that refuses an option).
int plan_failed(const NodeJob& job, const LaunchPlan& plan) {
  abort_job(job, host_name(), first_error_reason(plan.errors));
  return 2;
}

// A shell's "could not run it" codes (126, 127: shell_could_not_run) tell the head over SSH
// that this agent never started (launcher/head.cc, agent_ended), and it says so at once. A node
// whose job ended with one of them (a worker's "command not found") exits 1: the job's code
// travels through the rendezvous, an agent's own is only the head's clue.
int agent_exit_code(int code) {
  return shell_could_not_run(code) ? 1 : code;
}

// An SSH agent's job: one JSON line on stdin. Read a block at a time: what follows the line (the
// head sends nothing more) would be dropped unread by the lifeline's watcher anyway, which only
// waits for stdin's end (coordinator/watch.cc); one byte per read cost an agent ~600 system
// calls. Nothing when stdin ends (or fails) before the line's first byte.
std::optional<std::string> read_job_line() {
  std::string line;
  char buf[4096];
  while (line.size() < (1u << 20)) {
    ssize_t n = read(STDIN_FILENO, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 && line.empty()) return std::nullopt;
    if (n <= 0) break;
    const char* end = static_cast<const char*>(memchr(buf, '\n', static_cast<size_t>(n)));
    line.append(buf, end != nullptr ? static_cast<size_t>(end - buf) : static_cast<size_t>(n));
    if (end != nullptr) break;
  }
  return line;
}

// A Slurm agent's place in the job: its node among the job's nodes (by the name slurmd runs as),
// and the head's rendezvous at the address srun ran at.
void place_slurm_agent(transport::AgentJob& record) {
  const char* name = std::getenv("SLURMD_NODENAME");
  const char* head = std::getenv("SLURM_LAUNCH_NODE_IPADDR");
  if (name == nullptr || head == nullptr) {
    throw std::runtime_error(
        "SLURMD_NODENAME or SLURM_LAUNCH_NODE_IPADDR is not set: not a task "
        "of an srun step");
  }
  for (const auto& n : record.nodes) {
    if (n.host != name) continue;
    record.node_rank = n.node_rank;
    record.nproc = n.nproc;
    record.gpus = n.gpus;
  }
  if (record.node_rank < 0) {
    throw std::runtime_error(fmt::format("{} is not a node of the job", name));
  }
  record.endpoint = make_endpoint(head, record.port);
  const char* token = std::getenv("MLRUN_RDZV_TOKEN");
  record.token = token != nullptr ? token : "";
}

// The job this agent is handed, this node's place in it found, and the head's environment,
// log level and directory taken on. Throws std::exception on a bad record.
transport::AgentJob take_agent_job(const std::string& text, bool slurm) {
  transport::AgentJob record = transport::decode_agent_job(text);
  if (slurm) {
    place_slurm_agent(record);
  } else if (record.node_rank < 0) {
    throw transport::AgentJobError("field node_rank: missing");
  }
  for (const auto& [name, value] : record.env) setenv(name.c_str(), value.c_str(), 1);
  // The head's level, whichever way it was chosen; the agent's lines reach the head's stderr
  // through its relay, tagged with this host's name.
  if (auto level = log::parse_level(record.log_level)) log::init(*level, host_name());
  if (chdir(record.cwd.c_str()) != 0) {
    fmt::print(stderr, "mlrun: warning: {}: cannot enter {} ({}); running in {}\n", host_name(),
               record.cwd, std::strerror(errno), getenv("HOME") ? getenv("HOME") : "/");
  }
  return record;
}

// This node's part of the job as the node coordinator takes it.
NodeJob node_job_of(const transport::AgentJob& record) {
  NodeJob job;
  job.endpoint = record.endpoint;
  job.token = record.token;
  job.job_id = record.job_id;
  job.nnodes = record.nnodes;
  job.node_rank = record.node_rank;
  job.nproc = record.nproc;
  job.tree_parent = record.parent;
  // The head serves the rendezvous and outlives every agent: nobody waits for a done mark.
  job.mark_done = false;
  // 0: the head did not say; the defaults.
  if (record.heartbeat_interval.count() > 0) job.heartbeat_interval = record.heartbeat_interval;
  if (record.heartbeat_timeout.count() > 0) job.heartbeat_timeout = record.heartbeat_timeout;
  return job;
}

// The agent's mlrun options: the head's, with this node's worker count and the head's grace.
ParseResult agent_options(const transport::AgentJob& record, const NodeJob& job) {
  std::vector<std::string> args = record.args;
  args.insert(args.begin(), fmt::format("--nproc_per_node={}", job.nproc));
  ParseResult parsed = parse_options(args);
  // The head planned the same command line without an error: this host's mlrun is another.
  for (auto& e : parsed.errors) {
    e.message = fmt::format("this host's mlrun ({}) refuses the head's command line: {}",
                            self_path(), e.message);
  }
  if (record.grace.count() > 0) {
    parsed.options.grace_period = static_cast<double>(record.grace.count()) / 1000;
  }
  return parsed;
}

// A Slurm agent's grace period, cut to KillWait by the head once Slurm told it
// (transport/slurm.h kSlurmGraceKey): asked for on a thread of its own while this agent plans.
class SlurmGrace {
 public:
  explicit SlurmGrace(const NodeJob& job)
      : thread_([this, endpoint = job.endpoint, token = job.token, id = job.job_id] {
          try {
            grace_ = transport::slurm_grace_from_head(endpoint, token, id);
          } catch (...) {
            failure_ = std::current_exception();
          }
        }) {}
  ~SlurmGrace() {
    if (thread_.joinable()) thread_.join();
  }
  SlurmGrace(const SlurmGrace&) = delete;
  SlurmGrace& operator=(const SlurmGrace&) = delete;

  // Joins the thread. Returns -1 with o's grace set, else the agent's exit code: 0 when the job
  // was aborted (a refused Slurm version: the head says why), 1, said, when the head is out of
  // reach (this agent cannot take part).
  int take(Options& o) {
    thread_.join();
    try {
      if (failure_) std::rethrow_exception(failure_);
      o.grace_period = static_cast<double>(grace_.count()) / 1000;
      return -1;
    } catch (const rendezvous::AbortedError&) {
      return 0;
    } catch (const std::exception& e) {
      error(fmt::format("agent on {}: no grace period from the head: {}", host_name(), e.what()));
      return 1;
    }
  }

 private:
  std::chrono::milliseconds grace_{0};
  std::exception_ptr failure_;
  std::thread thread_;  // Last: it starts once the fields it writes exist.
};

// How long an agent's stdin may have ended before its lifeline SIGKILLs it.
std::chrono::milliseconds awake_bound(double grace_period) {
  return std::chrono::milliseconds(static_cast<long>(grace_period * 1000)) +
         std::chrono::seconds(10);
}

}  // namespace

// `mlrun agent`: one node of a job started by a head. Over SSH its job arrives on stdin (one JSON
// line: rendezvous endpoint and token, node rank, worker count, the head's options, environment
// and directory), and stdin stays open: its end means the head is gone. Through srun
// (transport/slurm.h) the job is in MLRUN_AGENT_JOB and the token in MLRUN_RDZV_TOKEN; the head's
// end reaches the agent as the end of the step, or of its rendezvous connection.
int agent_command(const std::vector<std::string>&) {
  const char* from_env = std::getenv("MLRUN_AGENT_JOB");
  const bool slurm = from_env != nullptr;
  // The lifeline first, forked while this process is small and has one thread: the fewer pages
  // it has, the fewer the fork copies and the fewer copy-on-write faults follow
  // (docs/launcher.md, "Start-up"). Over SSH, a hung agent (SIGSTOP, D state) never reads its
  // stdin's end: its lifeline sees it, and SIGKILLs the agent when it has not stopped its
  // workers by itself within the grace period and 10 s, as it would when awake. Until the job
  // says its grace period, the default's.
  Lifeline lifeline = slurm ? Lifeline::fork_now()
                            : Lifeline::fork_now(STDIN_FILENO, awake_bound(Options().grace_period));
  // The head starts an agent right after its host's connect and hands it the job once every
  // host is connected; when one could not be, it ends this stdin first. Nothing ran: exit 0, in
  // silence (docs/multinode.md "How a launch starts").
  std::optional<std::string> given = slurm ? std::string(from_env) : read_job_line();
  if (!given) return 0;
  // Its stdout and stderr are its parent's relay, not a person's terminal (worker/output.h).
  if (!slurm) set_console_stall(kRelayStall);
  // The workers inherit this environment: the job's description is not theirs.
  unsetenv("MLRUN_AGENT_JOB");
  transport::AgentJob record;
  try {
    record = take_agent_job(*given, slurm);  // A copy of MLRUN_AGENT_JOB's value in a step.
  } catch (const std::exception& e) {
    error(fmt::format("agent on {}: bad job description{}: {}", host_name(),
                      slurm ? " in MLRUN_AGENT_JOB" : " on stdin", e.what()));
    return 2;
  }
  NodeJob job = node_job_of(record);
  std::optional<SlurmGrace> slurm_grace;
  if (slurm) slurm_grace.emplace(job);
  // A node without a given worker count runs one worker per GPU it sees (inside a Slurm step:
  // the job's GPUs on this node), else one.
  if (job.nproc == 0) job.nproc = std::max(1, count_gpus());
  log::info("agent up: node {} of {}, {} worker{}, rendezvous at {}", job.node_rank, job.nnodes,
            job.nproc, job.nproc == 1 ? "" : "s", job.endpoint);
  ParseResult parsed = agent_options(record, job);
  std::string rdzv_host;
  int rdzv_port;
  split_endpoint(job.endpoint, rdzv_host, rdzv_port);
  // The interface that reaches the head's rendezvous is the one the job's traffic takes.
  parsed.options.master_addr = rdzv_host;
  std::vector<std::string> errors;
  for (auto& e : parsed.errors) errors.push_back(e.message);
  LaunchPlan plan;
  plan.gpu_ids = record.gpus;
  bool planned = plan_launch(parsed.options, plan, errors);
  if (int code = slurm_grace ? slurm_grace->take(parsed.options) : -1; code >= 0) return code;
  if (!planned) return plan_failed(job, plan);
  plan.job_id = job.job_id;
  if (slurm) {
    // In a step Slurm signals every process, the workers too: its USR1 is theirs already, and
    // its SIGTERM is a scancel, the time limit or a preemption, which the summary says.
    plan.signals.forward_own = false;
    job.signal_note = transport::slurm_signal_note(transport::read_slurm_env().job_id);
  }
  keep_forwarded_signals_harmless(plan.signals);
  if (!slurm) lifeline.set_bound(awake_bound(parsed.options.grace_period));
  signal(SIGPIPE, SIG_IGN);
  job.print_summary = false;
  // The head's forwarded signals come through the rendezvous. One this agent gets itself goes to
  // its own workers only (over SSH; in a Slurm step Slurm has signalled them already).
  job.watch_signals = true;
  // An interior agent of the launch tree starts its children first (after the lifeline's fork,
  // at the top, which must not hold their connections: this agent's end closes them, their
  // lifeline).
  std::unique_ptr<transport::Subtree> children;
  if (!slurm) children = start_children(record);
  int code = run_this_node(parsed.options, plan, job, lifeline, slurm ? -1 : STDIN_FILENO,
                           [&](const std::string& why) { abort_job(job, plan.hostname, why); });
  // Each child ends with the job, after stopping its workers (and its own children).
  if (children) {
    children->finish(
        std::chrono::milliseconds(static_cast<long>(parsed.options.grace_period * 1000)) +
        std::chrono::seconds(10));
  }
  // Through srun, an agent's non-zero exit makes Slurm kill every other agent at once
  // (--kill-on-bad-exit), before they have stopped their workers: the job's result travels
  // through the rendezvous, and a non-zero exit is left to an agent that could not take part.
  return slurm ? 0 : agent_exit_code(code);
}

}  // namespace mlrun
