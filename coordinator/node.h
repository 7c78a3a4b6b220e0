// One node's part of a job: join the rendezvous for every attempt, run this node's workers,
// tell the other nodes about a failure here and stop when one happens elsewhere, and agree with
// every node on whether the attempt failed (and so on restarting). A single-node job is the
// case nnodes = 1 of the same code.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "launcher/head_signals.h"
#include "worker/agent.h"
#include "worker/env.h"
#include "worker/lifeline.h"
#include "worker/numa.h"
#include "worker/signals.h"

namespace mlrun {

struct NodeJob {
  std::string endpoint;  ///< The rendezvous server, "host:port".
  std::string token;
  std::string job_id;
  int nnodes = 1;
  int node_rank = -1;  ///< -1: numbered in join order.
  int nproc = 1;       ///< This node's workers.
  /// MASTER_ADDR. Empty: node 0's own address on its route to the rendezvous server.
  std::string master_addr;
  int master_port = 0;  ///< 0: a port free on node 0, fresh for every attempt.
  std::vector<std::string> argv;
  /// Everything of the workers' environment that does not depend on the node or the attempt.
  GroupEnv env;
  int max_restarts = 0;
  std::chrono::milliseconds grace{5000};
  /// Bound of each join (every node present) and of fetching node 0's master address.
  std::chrono::milliseconds join_timeout{std::chrono::minutes(10)};
  /// Bound of this node's first connection to the rendezvous, retries included. A node started
  /// by hand (torchrun style, a Kubeflow pod) gets join_timeout: its server's node may start
  /// minutes later, as torchrun's static rendezvous waits for it. An agent's head listens already.
  std::chrono::milliseconds connect_timeout{std::chrono::seconds(60)};
  /// Added to each "waiting for the rendezvous" line: who serves it and what to do if it died
  /// (the per-node Slurm mode names node 0's step and its scancel).
  std::string waiting_hint;
  /// Print failure summaries and restart notes (the head's or a user's terminal); remote agents
  /// leave that to the head.
  bool print_summary = true;
  /// Say, while a join waits, that it does (coordinator/watch.cc report_join): off where this
  /// process's own rendezvous server says whom the join waits for (a head's own node).
  bool report_join_wait = true;
  std::string host;  ///< This node's name, for summaries.
  /// The host whose agent started this one in the launch tree (transport/tree.h); empty: the
  /// head, or no agent. Its end is not the head's, and its own parent reports it.
  std::string tree_parent;
  /// Global rank 0, if it runs on this node, reads this launcher's stdin (SpawnRequest::stdin_fd);
  /// every other worker reads /dev/null. Off for agents, whose stdin is the head's lifeline.
  bool stdin_to_rank0 = false;
  /// Elastic jobs (--nnodes=MIN:MAX, docs/multinode.md "Elastic jobs"): nnodes_min < nnodes.
  /// 0 or nnodes: a fixed-size job, which has no rounds, last call or heartbeats.
  int nnodes_min = 0;
  std::chrono::milliseconds last_call{std::chrono::seconds(30)};
  std::chrono::milliseconds heartbeat_interval{std::chrono::seconds(5)};
  std::chrono::milliseconds heartbeat_timeout{std::chrono::seconds(30)};
  /// Which signals to this launcher stop the job and which go to the workers (worker/signals.h).
  SignalPolicy signals;
  /// --numa_binding: local rank i's CPUs and memory nodes (worker/numa.h); empty: none.
  std::vector<NumaBinding> numa;
  /// A forwarded signal that reaches this launcher goes to every other node too (the head of a
  /// job it started on several hosts); otherwise only to this node's workers, as with torchrun.
  bool publish_signals = false;
  /// Forwarded signals the head publishes reach this node's workers (nodes started by a head).
  bool watch_signals = false;
  /// No head watches this node (torchrun style): the server is to take the close of its
  /// heartbeats' connection for the node's loss until the node says it is done (node_watch), so
  /// that the others do not wait for a killed node forever. A head reports its agents' ends.
  bool lost_on_close = false;
  /// Appended to the reason of a stop signal here: who sends them ("sent by Slurm ...": an agent
  /// in a Slurm step, where only Slurm signals it).
  std::string signal_note;
  /// This launcher serves the rendezvous (node 0 or the endpoint's owner): it cannot leave an
  /// elastic job, since the job's server goes with it, and at the end it waits for every node's
  /// done mark before it leaves (no other node waits).
  bool serves_rendezvous = false;
  /// After its last attempt this node sets its done mark, for a node that serves the rendezvous.
  /// Off for an agent: its server is the head's, which waits for every agent's end itself.
  bool mark_done = true;
  bool elastic() const { return nnodes_min > 0 && nnodes_min < nnodes; }
};

/// torchrun's --rdzv_conf "key=value,key=value": join_timeout (default 600 s),
/// last_call_timeout (30 s), heartbeat_interval (5 s), heartbeat_timeout (30 s), in seconds.
/// torchrun's other keys (read_timeout, close_timeout, is_host, timeout, ...) are accepted and
/// ignored.
struct RdzvConf {
  std::chrono::milliseconds join_timeout{std::chrono::minutes(10)};
  std::chrono::milliseconds last_call{std::chrono::seconds(30)};
  std::chrono::milliseconds heartbeat_interval{std::chrono::seconds(5)};
  std::chrono::milliseconds heartbeat_timeout{std::chrono::seconds(30)};
};
/// Parses text into conf; returns the errors (empty when it is fine).
std::vector<std::string> parse_rdzv_conf(const std::string& text, RdzvConf& conf);

struct NodeHooks {
  std::function<WorkerRoutes(int attempt, const WorkerSpec&)> routes;
  /// TORCHELASTIC_ERROR_FILE of a rank in an attempt (its directory created).
  std::function<std::string(int attempt, int rank)> error_file;
  /// The message a worker left in its error file, or empty.
  std::function<std::string(int attempt, int rank)> error_message;
};

/// Runs this node's workers for every attempt and returns the job's exit code: 0, the first
/// failed worker's code wherever it ran (128+N for signal N), 128+N after signal N reached this
/// launcher (143 for an elastic node that left the job on SIGTERM), 1 when the rendezvous failed
/// or the job was aborted. lifeline_fd >= 0 is watched:
/// its end-of-file (the head is gone) stops this node.
int run_node(const NodeJob& job, const NodeHooks& hooks, Lifeline& lifeline, int lifeline_fd);

/// The server's refusal of this node's token, and, where the token is derived from the job id
/// and the endpoint as this node wrote them, why another node's may differ.
std::string refusal_reason(const NodeJob& job, const std::exception& refusal);

/// For a head that runs no workers itself: follows every attempt of a job of nnodes nodes to its
/// end, printing summaries as a node would, and returns the job's exit code; an abort after one of
/// signals' signals ends the watch with 128+N. signals' callback is the caller's to set.
int watch_job(const std::string& endpoint, const std::string& token, const std::string& job_id,
              int nnodes, int max_restarts, const HeadSignals& signals);

}  // namespace mlrun
