// The plan of a launch, made before anything starts: the program, the workers, the backend and
// network, the hosts; every user error found on the way, reported together.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "coordinator/node.h"
#include "launcher/head.h"
#include "launcher/options.h"
#include "worker/agent.h"
#include "worker/env.h"
#include "worker/network.h"
#include "worker/numa.h"
#include "worker/signals.h"

namespace mlrun {

// The job as planned for this node, before anything starts.
struct LaunchPlan {
  int nproc = 1;
  int world_size = 1;
  std::vector<std::string> argv;
  std::string master_addr;
  std::string backend;
  std::string job_id;
  std::string run_id;
  std::string log_dir;     // --log_dir; empty with log_files: a fresh one (launcher/log_dir.h).
  bool log_files = false;  // Per-rank stdout/stderr files.
  std::string hostname;
  std::vector<std::pair<std::string, std::string>> exports;
  InterfaceChoice iface;
  std::vector<std::pair<std::string, std::string>> network_defaults;
  HostPlan hosts;        // --hostfile / -H only.
  SignalPolicy signals;  // From --signals_to_handle.
  RdzvConf rdzv;         // From --rdzv_conf, parsed once here.
  // This node's GPU indices as given to it (an agent's from its head), set before plan_launch;
  // empty: from --include / --num_gpus here.
  std::vector<int> gpu_ids;
  // The workers' CUDA_VISIBLE_DEVICES entries (launcher/placement.h); empty: inherited as is.
  std::vector<std::string> gpus;
  // --numa_binding: one per local rank.
  std::vector<NumaBinding> numa;
  // Set when plan_launch fails on errors of this node's own alone (its files, environment, GPUs,
  // interfaces); empty when the command line, which every node started alike shares, has one.
  std::vector<std::string> node_errors;
  // Every error plan_launch said, in order: node_errors, or the command line's and the rest.
  std::vector<std::string> errors;
};

/// Random bytes as lowercase hex (getrandom).
std::string random_hex(std::size_t bytes);

/// The least a token given by the user (MLRUN_RDZV_TOKEN, a token file) must have: anyone who
/// can guess it may join or abort the job. random_hex(16) gives 32 characters.
inline constexpr std::size_t kMinTokenChars = 16;
inline constexpr std::size_t kMinTokenDistinctChars = 8;

/// The token in a file (trailing whitespace removed). Empty with `why` set when the file cannot
/// be read or is empty; a token with `why` set is a warning (the file is readable by others).
std::string read_token_file(const std::string& path, std::string& why);

/// Why a user's token is too weak to guard a job, or nothing when it is strong enough.
std::optional<std::string> weak_token(const std::string& token);

/// s quoted for a POSIX shell: 'it'\''s'.
std::string shell_quote(const std::string& s);

/// s as one shell word: as is when it holds only characters no shell treats specially, in single
/// quotes otherwise, and as bash's $'...' when it holds a newline or another control character
/// (so that printed plans stay one line per item).
std::string shell_word(const std::string& s);
/// Each of words through shell_word, joined by spaces.
std::string shell_words(const std::vector<std::string>& words);

/// This program's own path (/proc/self/exe), or "mlrun" when it cannot be read.
std::string self_path();

/// Prints "mlrun: error: message" on stderr.
void error(std::string_view message);

/// Whether the job runs on the hosts of --hostfile / -H, started from here.
bool on_hosts(const Options& o);

/// Checks the command line (errors: the parser's) and this machine, fills plan, and reports
/// every error together. Returns false when there was any.
bool plan_launch(const Options& o, LaunchPlan& plan, std::vector<std::string> errors);

/// The first of errors (plan.node_errors, plan.errors), with how many more there are: why this
/// node cannot start, in the abort that tells the other nodes. Empty when there are none.
std::string first_error_reason(const std::vector<std::string>& errors);

/// Chooses this node's interface for traffic toward `toward` (an address; the master's, or this
/// host's own on the route to the other hosts) and sets plan.iface and plan.network_defaults.
/// Returns a user error for an --iface that is not up here.
std::optional<std::string> choose_network(const Options& o, LaunchPlan& plan,
                                          const std::string& toward);

/// The workers' environment that is the same on every node and in every attempt.
GroupEnv env_template(const Options& o, const LaunchPlan& plan);

/// TORCHELASTIC_ERROR_FILE of a rank: DIR/attempt_N/RANK/error.json.
std::string error_file(const std::string& dir, int attempt, int rank);

/// For --dry-run: every option that was set, its value and where it came from (the command line
/// or an environment variable such as PET_NNODES); the rest are defaults.
void print_option_sources(const Options& o);

/// Prints a single node's plan for --dry-run.
void print_dry_run(const Options& o, const LaunchPlan& plan);
/// One line for --dry-run: who serves PyTorch's TCPStore (--store).
std::string store_line(const Options& o);

/// This node's files of --duplicate_stdout_filters / --duplicate_stderr_filters in one attempt,
/// DIR/attempt_N/filtered_{stdout,stderr}.log: opened for its first worker, shared by the rest.
struct DuplicateLogs {
  int attempt = -1;
  std::shared_ptr<const DuplicateLog> out;
  std::shared_ptr<const DuplicateLog> err;
};

/// Where a worker's output goes: the terminal (tagged, filtered, redirected as asked) and,
/// with a log directory, DIR/attempt_N/RANK/{stdout,stderr}.log; the lines of a tee'd stream
/// that --duplicate_*_filters pick also go to the attempt's file in duplicates.
WorkerRoutes routes_for(const Options& o, const LaunchPlan& plan, const std::string& run_dir,
                        int attempt, const WorkerSpec& w, DuplicateLogs& duplicates);

}  // namespace mlrun
