// The command line, parsed once into a plain struct (docs/design.md §3). Every user error of the
// command line is collected, so that all of them are reported together before anything runs.
#pragma once

#include <climits>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "launcher/flags.h"
#include "rendezvous/integer.h"

namespace mlrun {

/// Limits on the numbers of the command line, checked at parse time (exit 2 naming the limit):
/// each later becomes processes, connections or a wait, and none may overflow.
inline constexpr int kMaxNprocPerNode = 4096;  ///< Workers on one node.
inline constexpr int kMaxNodes = 16384;        ///< --nnodes (hosts: hostfiles' kMaxHosts).
/// --tree_width's default: Open MPI's tree spawn has radix 64, Slurm's message tree width 16; at
/// 32 the head opens at most 32 connections and 1,056 nodes are two levels deep.
inline constexpr int kDefaultTreeWidth = 32;
inline constexpr int kMaxWorldSize = 1 << 20;  ///< Ranks in a job (the protocol's groups).
inline constexpr int kMaxRestarts = 10000;     ///< --max_restarts.
inline constexpr double kMaxSeconds = 86400;   ///< --grace_period, --monitor_interval.

/// --redirects / --tee values, per stream: 0 none, 1 stdout, 2 stderr, 3 both.
struct StreamSpec {
  int all = 0;                                ///< For local ranks without their own entry.
  std::vector<std::pair<int, int>> per_rank;  ///< (local rank, mask) from "0:1,1:2".
  int for_local_rank(int local_rank) const;
};

/// torchrun's port for an --rdzv_endpoint that names none (its c10d default).
inline constexpr int kTorchrunRdzvPort = 29400;

struct Options {
  // torchrun's flags.
  std::string nproc_per_node = "1";  ///< N, auto, gpu or cpu, as given.
  int nnodes_min = 1;
  int nnodes_max = 1;
  int node_rank = 0;
  std::string master_addr;  ///< Empty: 127.0.0.1 for a single node.
  int master_port = 0;      ///< 0: a free port, picked per attempt.
  std::string rdzv_backend = "static";
  std::string rdzv_endpoint;
  std::string rdzv_id;
  std::string rdzv_conf;
  bool standalone = false;
  int max_restarts = 0;
  double monitor_interval = 0.1;  ///< Accepted for compatibility; exits are seen at once.
  std::string start_method = "spawn";
  std::string role = "default";
  std::string log_dir;
  StreamSpec redirects;
  StreamSpec tee;
  std::optional<std::vector<int>> local_ranks_filter;
  /// torchrun 2.x's --duplicate_stdout_filters / --duplicate_stderr_filters (its comma list).
  std::vector<std::string> duplicate_stdout_filters;
  std::vector<std::string> duplicate_stderr_filters;
  std::string local_addr;
  bool module = false;
  bool no_python = false;
  bool run_path = false;
  /// torchrun 2.9's --signals_to_handle: the signals that stop the job (worker/signals.h).
  std::string signals_to_handle = "SIGTERM,SIGINT,SIGHUP,SIGQUIT";
  /// torchrun's plugin hooks (Python entry points): accepted, with a note of what mlrun does.
  std::string logs_specs;
  std::string event_log_handler = "null";
  /// torchrun's --numa_binding: node, socket, exclusive or core-complex; empty: none.
  std::string numa_binding;
  /// torchrun's --virtual_local_rank: each worker sees its GPU alone, as device 0, LOCAL_RANK=0.
  bool virtual_local_rank = false;
  /// DeepSpeed's --num_gpus (GPUs 0..N-1 on every node) and --num_nodes (the first N hosts).
  int num_gpus = 0;
  int num_nodes = 0;

  // mpirun / DeepSpeed style.
  std::string hostfile;
  std::string hosts;
  int np = 0;
  std::string include;
  std::string exclude;
  std::vector<std::string> exports;  ///< -x VAR or VAR=VALUE, in order.

  // mlrun's own.
  /// --launcher auto|local|ssh|slurm: how the nodes are reached. choose_launcher
  /// (transport/slurm_env.h) resolves auto before planning and says why in launcher_why.
  std::string launcher = "auto";
  std::string launcher_why;
  /// "JOB.STEP" in the per-node mode (this mlrun is one task of `srun -N K mlrun ...`;
  /// choose_launcher): a node that fails before it joins ends that step (end_step_early).
  std::string slurm_step;
  /// --tree_width: past this many hosts with agents over SSH (or simulated ones), the head starts
  /// agents on this many and each agent starts the next level (docs/multinode.md "The launch
  /// tree").
  int tree_width = kDefaultTreeWidth;
  std::string backend = "auto";
  /// Who serves PyTorch's TCPStore: "mlrun" (the rendezvous server, docs/torch-store.md) or
  /// "torch" (worker rank 0 binds MASTER_PORT, as before).
  std::string store = "mlrun";
  std::string iface = "auto";
  bool dry_run = false;
  double grace_period = 5.0;  ///< Seconds between SIGTERM and SIGKILL at teardown.
  /// --stdin rank0 (or mpirun's 0): this launcher's stdin goes to global rank 0 when it runs
  /// here; none: every worker reads /dev/null.
  std::string stdin_mode = "rank0";
  /// -v (info), -vv (debug): mlrun's own log (worker/log.h); --log_level names the level.
  int verbose = 0;
  std::string log_level;
  bool help = false;
  bool version = false;

  std::string program;
  std::vector<std::string> program_args;

  /// The options as written, except those that only the head uses (hosts, node numbering,
  /// rendezvous, -x, dry run): what the head hands each node's agent.
  std::vector<std::string> node_args;
  /// Whether --nproc_per_node was given (it then overrides hostfile slots).
  bool nproc_given = false;
  /// Every option that was set, in the order applied, with its value as given and where it came
  /// from: "command line" or the environment variable (PET_NNODES, ...). Options not listed have
  /// their defaults. --dry-run prints them.
  struct Source {
    std::string option;  ///< "--nnodes"
    std::string value;   ///< Empty for a flag.
    std::string origin;  ///< "command line" or the variable's name.
  };
  std::vector<Source> sources;
};

/// A user error in the command line, with the option it concerns.
struct OptionError {
  std::string message;
};

struct ParseResult {
  Options options;
  std::vector<OptionError> errors;
};

/// Reads an environment variable; nullptr when it is not set.
using GetEnv = std::function<const char*(const std::string& name)>;

/// Parses argv (without argv[0]). Options stop at the program name or after "--". With getenv,
/// every torchrun option not on the command line is read from PET_<OPTION> as torchrun does
/// (PET_NPROC_PER_NODE, PET_MASTER_ADDR, ...; PET_STANDALONE=1 for a flag), and a few from the
/// variables torchrun also reads (TORCHELASTIC_SIGNALS_TO_HANDLE): flags win. Values from the
/// environment that agents need are added to node_args.
ParseResult parse_options(const std::vector<std::string>& args, const GetEnv& getenv = nullptr);

/// An option's setting as an error names it: "--nnodes=2" as typed, or "PET_NNODES=2" where it
/// came from that variable (a Kubeflow pod's user never typed the flag); `value` where it was not
/// set at all (its default). A flag without a value is its name alone.
std::string as_given(const Options& o, std::string_view option, std::string_view value);

/// " (from PET_NNODES)" where the option came from a variable, else "": for an error that names
/// the option itself.
std::string origin_note(const Options& o, std::string_view option);

/// The table of `mlrun`'s flags, writing into o; a bad value appends to errors.
FlagTable launch_flag_table(Options& o, std::vector<std::string>& errors);

/// The --help text.
std::string usage();

}  // namespace mlrun
