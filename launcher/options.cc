#include "launcher/options.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <functional>
#include <string_view>

#include <fmt/format.h>

namespace mlrun {
namespace {

bool parse_double(const std::string& s, double& out) {
  if (s.empty()) return false;
  try {
    std::size_t used = 0;
    out = std::stod(s, &used);
    return used == s.size();
  } catch (...) {
    return false;
  }
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  while (true) {
    auto at = s.find(sep);
    out.push_back(s.substr(0, at));
    if (at == std::string_view::npos) return out;
    s.remove_prefix(at + 1);
  }
}

using Errors = std::vector<OptionError>;
using Apply =
    std::function<void(Options&, const std::string& flag, const std::string& value, Errors&)>;

struct OptionSpec {
  std::vector<std::string_view> names;  // Long names in their '_' spelling, short names as is.
  bool takes_value;
  Apply apply;
};

void bad(Errors& errors, const std::string& flag, const std::string& value, std::string_view why) {
  errors.push_back({fmt::format("{}={}: {}", flag, value, why)});
}

Apply int_in_range(int Options::*field, int minimum, int maximum) {
  return [=](Options& o, const std::string& flag, const std::string& v, Errors& e) {
    int n;
    if (!parse_int(v, n) || n < minimum || n > maximum) {
      bad(e, flag, v,
          fmt::format("must be an integer from {} to {} (mlrun's limit)", minimum, maximum));
      return;
    }
    o.*field = n;
  };
}

Apply text(std::string Options::*field) {
  return [field](Options& o, const std::string&, const std::string& v, Errors&) { o.*field = v; };
}

Apply flag(bool Options::*field) {
  return [field](Options& o, const std::string&, const std::string&, Errors&) { o.*field = true; };
}

Apply one_of(std::string Options::*field, std::vector<std::string_view> allowed) {
  return [field, allowed](Options& o, const std::string& f, const std::string& v, Errors& e) {
    for (auto a : allowed) {
      if (v == a) {
        o.*field = v;
        return;
      }
    }
    bad(e, f, v, fmt::format("must be one of {}", fmt::join(allowed, ", ")));
  };
}

// A finite number of seconds up to kMaxSeconds: inf, nan or 1e300 would turn a bounded wait
// into none at all (or overflow the milliseconds it becomes).
Apply seconds(double Options::*field) {
  return [field](Options& o, const std::string& f, const std::string& v, Errors& e) {
    double d;
    if (!parse_double(v, d) || !(d >= 0 && d <= kMaxSeconds)) {
      bad(e, f, v,
          fmt::format("must be a number of seconds from 0 to {} (mlrun's limit)", kMaxSeconds));
      return;
    }
    o.*field = d;
  };
}

// "3" or "0:1,1:2": torchrun's Std values per local rank.
Apply stream_spec(StreamSpec Options::*field) {
  return [field](Options& o, const std::string& f, const std::string& v, Errors& e) {
    StreamSpec spec;
    int mask;
    if (parse_int(v, mask)) {
      if (mask < 0 || mask > 3)
        return bad(e, f, v, "must be 0 (none), 1 (stdout), 2 (stderr) or 3 (both)");
      spec.all = mask;
      o.*field = spec;
      return;
    }
    for (auto item : split(v, ',')) {
      auto parts = split(item, ':');
      int local_rank;
      if (parts.size() != 2 || !parse_int(parts[0], local_rank) || local_rank < 0 ||
          local_rank >= kMaxNprocPerNode || !parse_int(parts[1], mask) || mask < 0 || mask > 3) {
        return bad(e, f, v, "must be 0-3 or a list of LOCAL_RANK:0-3 (for example 0:3,1:2)");
      }
      spec.per_rank.emplace_back(local_rank, mask);
    }
    o.*field = spec;
  };
}

void apply_nproc(Options& o, const std::string& f, const std::string& v, Errors& e) {
  int n;
  if (v == "auto" || v == "gpu" || v == "cpu" ||
      (parse_int(v, n) && n >= 1 && n <= kMaxNprocPerNode)) {
    o.nproc_per_node = v;
  } else {
    bad(e, f, v,
        fmt::format(
            "must be a positive integer (at most {}, mlrun's limit) or one of auto, gpu, cpu",
            kMaxNprocPerNode));
  }
}

void apply_nnodes(Options& o, const std::string& f, const std::string& v, Errors& e) {
  auto parts = split(v, ':');
  int lo, hi;
  if (parts.size() == 1 && parse_int(parts[0], lo) && lo >= 1 && lo <= kMaxNodes) {
    o.nnodes_min = o.nnodes_max = lo;
  } else if (parts.size() == 2 && parse_int(parts[0], lo) && parse_int(parts[1], hi) && lo >= 1 &&
             hi >= lo && hi <= kMaxNodes) {
    o.nnodes_min = lo;
    o.nnodes_max = hi;
  } else {
    bad(e, f, v,
        fmt::format("must be N or MIN:MAX with 1 <= MIN <= MAX <= {} (mlrun's limit)", kMaxNodes));
  }
}

void apply_port(Options& o, const std::string& f, const std::string& v, Errors& e) {
  int port;
  if (!parse_int(v, port) || port < 0 || port > 65535)
    return bad(e, f, v, "must be a port, 0-65535");
  o.master_port = port;
}

void apply_filter(Options& o, const std::string& f, const std::string& v, Errors& e) {
  std::vector<int> ranks;
  for (auto item : split(v, ',')) {
    int r;
    if (!parse_int(item, r) || r < 0 || r >= kMaxNprocPerNode) {
      return bad(e, f, v, "must be a comma list of local ranks");
    }
    ranks.push_back(r);
  }
  o.local_ranks_filter = ranks;
}

const std::vector<OptionSpec>& table() {
  static const std::vector<OptionSpec> specs = {
      {{"--nproc_per_node"}, true, apply_nproc},
      {{"--nnodes"}, true, apply_nnodes},
      {{"--node_rank"}, true, int_in_range(&Options::node_rank, 0, kMaxNodes - 1)},
      {{"--master_addr"}, true, text(&Options::master_addr)},
      {{"--master_port"}, true, apply_port},
      {{"--rdzv_backend"}, true, one_of(&Options::rdzv_backend, {"static", "c10d", "mlrun"})},
      {{"--rdzv_endpoint"}, true, text(&Options::rdzv_endpoint)},
      {{"--rdzv_id"}, true, text(&Options::rdzv_id)},
      {{"--rdzv_conf"}, true, text(&Options::rdzv_conf)},
      {{"--standalone"}, false, flag(&Options::standalone)},
      {{"--max_restarts"}, true, int_in_range(&Options::max_restarts, 0, kMaxRestarts)},
      {{"--monitor_interval"}, true, seconds(&Options::monitor_interval)},
      {{"--start_method"}, true, one_of(&Options::start_method, {"spawn", "fork", "forkserver"})},
      {{"--role"}, true, text(&Options::role)},
      {{"--log_dir"}, true, text(&Options::log_dir)},
      {{"--redirects", "-r"}, true, stream_spec(&Options::redirects)},
      {{"--tee", "-t"}, true, stream_spec(&Options::tee)},
      {{"--local_ranks_filter"}, true, apply_filter},
      {{"--local_addr"}, true, text(&Options::local_addr)},
      {{"--module", "-m"}, false, flag(&Options::module)},
      {{"--no_python"}, false, flag(&Options::no_python)},
      {{"--run_path"}, false, flag(&Options::run_path)},
      {{"--signals_to_handle"}, true, text(&Options::signals_to_handle)},
      {{"--hostfile", "--machinefile"}, true, text(&Options::hostfile)},
      {{"--hosts", "--host", "-H"}, true, text(&Options::hosts)},
      {{"-np", "-n", "--np"}, true, int_in_range(&Options::np, 1, kMaxWorldSize)},
      {{"--include", "-i"}, true, text(&Options::include)},
      {{"--exclude", "-e"}, true, text(&Options::exclude)},
      {{"-x"},
       true,
       [](Options& o, const std::string& f, const std::string& v, Errors& e) {
         if (v.empty() || v.front() == '=') return bad(e, f, v, "must be VAR or VAR=VALUE");
         o.exports.push_back(v);
       }},
      {{"--backend"}, true, one_of(&Options::backend, {"auto", "nccl", "gloo", "mpi"})},
      {{"--launcher"}, true, one_of(&Options::launcher, {"auto", "local", "ssh", "slurm", "sim"})},
      {{"--tree_width"}, true, int_in_range(&Options::tree_width, 2, kMaxNodes)},
      {{"--iface"}, true, text(&Options::iface)},
      {{"--store"}, true, one_of(&Options::store, {"mlrun", "torch"})},
      {{"--dry_run"}, false, flag(&Options::dry_run)},
      // torchrun 2.x's name for the same period.
      {{"--grace_period", "--shutdown_timeout"}, true, seconds(&Options::grace_period)},
      {{"--logs_specs"}, true, text(&Options::logs_specs)},
      {{"--numa_binding"},
       true,
       one_of(&Options::numa_binding, {"node", "socket", "exclusive", "core-complex"})},
      {{"--virtual_local_rank"}, false, flag(&Options::virtual_local_rank)},
      {{"--num_gpus", "--num_accelerators"},
       true,
       int_in_range(&Options::num_gpus, 1, kMaxNprocPerNode)},
      {{"--num_nodes"}, true, int_in_range(&Options::num_nodes, 1, kMaxNodes)},
      {{"--event_log_handler"}, true, text(&Options::event_log_handler)},
      {{"--stdin"}, true, one_of(&Options::stdin_mode, {"rank0", "0", "none"})},
      {{"--verbose", "-v"}, false, [](Options& o, auto&, auto&, Errors&) { ++o.verbose; }},
      {{"-vv"}, false, [](Options& o, auto&, auto&, Errors&) { o.verbose += 2; }},
      {{"--log_level"}, true, text(&Options::log_level)},
      {{"--help", "-h"}, false, flag(&Options::help)},
      {{"--version"}, false, flag(&Options::version)},
  };
  return specs;
}

const OptionSpec* find_spec(const std::string& name) {
  for (const auto& spec : table()) {
    for (auto n : spec.names) {
      if (n == name) return &spec;
    }
  }
  return nullptr;
}

// Options only the head acts on; an agent gets its node's share of them in other form.
bool is_head_only(const OptionSpec* spec) {
  static const std::vector<std::string_view> head_only = {"--nproc_per_node",
                                                          "--nnodes",
                                                          "--node_rank",
                                                          "--master_addr",
                                                          "--master_port",
                                                          "--rdzv_backend",
                                                          "--rdzv_endpoint",
                                                          "--rdzv_id",
                                                          "--rdzv_conf",
                                                          "--standalone",
                                                          "--hostfile",
                                                          "--hosts",
                                                          "-np",
                                                          "--include",
                                                          "--exclude",
                                                          "-x",
                                                          "--dry_run",
                                                          "--launcher",
                                                          "--tree_width",
                                                          "--stdin",
                                                          "--verbose",
                                                          "-vv",
                                                          "--log_level",
                                                          "--logs_specs",
                                                          "--num_gpus",
                                                          "--num_nodes",
                                                          "--event_log_handler",
                                                          "--help",
                                                          "--version",
                                                          "--local_addr"};
  return std::find(head_only.begin(), head_only.end(), spec->names.front()) != head_only.end();
}

// "--nproc-per-node" and "--nproc_per_node" are one option, as in torchrun.
std::string canonical(std::string_view name) {
  std::string out(name);
  if (out.rfind("--", 0) == 0) {
    for (std::size_t i = 2; i < out.size(); ++i) {
      if (out[i] == '-') out[i] = '_';
    }
  }
  return out;
}

void apply_option(ParseResult& result, const OptionSpec& spec, const std::string& value) {
  Options& o = result.options;
  const std::string name(spec.names.front());
  spec.apply(o, name, value, result.errors);
  if (name == "--nproc_per_node") o.nproc_given = true;
  if (!is_head_only(&spec)) {
    o.node_args.push_back(name);
    if (spec.takes_value) o.node_args.push_back(value);
  }
}

// Options read from the environment when they are not on the command line: torchrun's, from
// PET_<OPTION> (its argparse `env` and `check_env` actions; --logs_specs and --numa_binding have
// none), and the grace period from TORCH_ELASTIC_SHUTDOWN_TIMEOUT.
constexpr std::string_view kPetOptions[] = {"--nnodes",
                                            "--nproc_per_node",
                                            "--rdzv_backend",
                                            "--rdzv_endpoint",
                                            "--rdzv_id",
                                            "--rdzv_conf",
                                            "--standalone",
                                            "--max_restarts",
                                            "--monitor_interval",
                                            "--start_method",
                                            "--role",
                                            "--module",
                                            "--no_python",
                                            "--run_path",
                                            "--log_dir",
                                            "--redirects",
                                            "--tee",
                                            "--local_ranks_filter",
                                            "--node_rank",
                                            "--master_addr",
                                            "--master_port",
                                            "--local_addr",
                                            "--signals_to_handle",
                                            "--event_log_handler",
                                            "--grace_period"};

// "--nproc_per_node" -> "PET_NPROC_PER_NODE".
std::string pet_name(std::string_view option) {
  std::string out = "PET_";
  for (char c : option.substr(2))
    out += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

// The variables an option is read from, first found wins: PET_<OPTION>, then any other name
// torchrun reads it under.
std::vector<std::string> env_names(std::string_view option) {
  // mlrun's own option: only torch elastic's variable for the same period.
  if (option == "--grace_period") return {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT"};
  std::vector<std::string> names{pet_name(option)};
  // torchrun's launch_agent and its worker processes read the list here too.
  if (option == "--signals_to_handle") names.emplace_back("TORCHELASTIC_SIGNALS_TO_HANDLE");
  return names;
}

void apply_environment(ParseResult& result, const std::vector<const OptionSpec*>& given,
                       const GetEnv& getenv) {
  for (auto option : kPetOptions) {
    const OptionSpec* spec = find_spec(std::string(option));
    if (spec == nullptr || std::find(given.begin(), given.end(), spec) != given.end()) continue;
    for (const auto& var : env_names(option)) {
      const char* raw = getenv(var);
      if (raw == nullptr) continue;
      std::string value = raw;
      std::size_t errors_before = result.errors.size();
      if (!spec->takes_value) {
        // torchrun's check_env: bool(int(value)).
        int n;
        if (!parse_int(value, n)) {
          result.errors.push_back(
              {fmt::format("{}={}: must be 0 or 1 (for {})", var, value, option)});
          break;
        }
        if (n == 0) break;
      }
      apply_option(result, *spec, value);
      // An error names the variable, not a flag the user never typed.
      for (std::size_t e = errors_before; e < result.errors.size(); ++e) {
        result.errors[e].message = fmt::format("{} (from {})", result.errors[e].message, var);
      }
      result.options.sources.push_back({std::string(option), value, var});
      break;
    }
  }
}

}  // namespace

bool parse_int(std::string_view s, int& out, int lo, int hi) {
  int value;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || value < lo || value > hi) {
    return false;
  }
  out = value;
  return true;
}

FlagToken split_flag(const std::string& arg) {
  FlagToken t;
  auto eq = arg.rfind("--", 0) == 0 || arg.rfind("-", 0) == 0 ? arg.find('=') : std::string::npos;
  t.name = canonical(arg.substr(0, eq));
  if (eq != std::string::npos) {
    t.value = arg.substr(eq + 1);
    t.has_value = true;
  }
  return t;
}

int StreamSpec::for_local_rank(int local_rank) const {
  for (const auto& [r, mask] : per_rank) {
    if (r == local_rank) return mask;
  }
  return per_rank.empty() ? all : 0;
}

ParseResult parse_options(const std::vector<std::string>& args, const GetEnv& getenv) {
  ParseResult result;
  Options& o = result.options;
  std::vector<const OptionSpec*> given;
  std::size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // The program.
    FlagToken token = split_flag(arg);
    const std::string& name = token.name;
    const OptionSpec* spec = find_spec(name);
    if (spec == nullptr) {
      result.errors.push_back({fmt::format("unknown option '{}' (see mlrun --help)", arg)});
      continue;
    }
    std::string value;
    if (spec->takes_value) {
      if (token.has_value) {
        value = token.value;
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        result.errors.push_back({fmt::format("option '{}' needs a value", name)});
        continue;
      }
    } else if (token.has_value) {
      result.errors.push_back({fmt::format("option '{}' takes no value", name)});
      continue;
    }
    apply_option(result, *spec, value);
    given.push_back(spec);
    o.sources.push_back({std::string(spec->names.front()), value, "command line"});
  }
  if (i < args.size()) {
    o.program = args[i];
    o.program_args.assign(args.begin() + static_cast<long>(i) + 1, args.end());
  }
  if (getenv) apply_environment(result, given, getenv);
  if (o.help || o.version) return result;
  if (o.program.empty()) {
    result.errors.push_back({"no program to run (usage: mlrun [options] PROGRAM [ARGS...])"});
  }
  if (o.node_rank >= o.nnodes_max) {
    result.errors.push_back(
        {fmt::format("--node_rank={} must be less than --nnodes={}", o.node_rank, o.nnodes_max)});
  }
  if (int n; parse_int(o.nproc_per_node, n) &&
             static_cast<std::int64_t>(n) * o.nnodes_max > kMaxWorldSize) {
    result.errors.push_back({fmt::format(
        "--nproc_per_node={} --nnodes={}: a world of {} ranks is more than the limit of {}",
        o.nproc_per_node, o.nnodes_max, static_cast<std::int64_t>(n) * o.nnodes_max,
        kMaxWorldSize)});
  }
  if (o.module && o.no_python) {
    result.errors.push_back({"-m runs a Python module and cannot be used with --no_python"});
  }
  return result;
}

std::string usage() {
  return R"(usage: mlrun [options] PROGRAM [ARGS...]

Starts PROGRAM as a group of distributed workers with RANK, WORLD_SIZE, MASTER_ADDR and the
rest of torchrun's environment. PROGRAM ending in .py runs under python3 -u (or $PYTHON).

torchrun options (either spelling: --nproc_per_node or --nproc-per-node):
  --nproc_per_node N|auto|gpu|cpu  workers on this node (default 1)
  --nnodes N|MIN:MAX               nodes in the job (default 1)
  --node_rank R                    this node's rank (static rendezvous)
  --master_addr A, --master_port P where PyTorch's rank 0 listens (default: a free port)
  --rdzv_backend, --rdzv_endpoint, --rdzv_id, --rdzv_conf, --standalone, --local_addr
  --max_restarts N                 restart the whole group up to N times after a failure
  --monitor_interval S             accepted; mlrun sees a worker's exit at once
  --start_method M                 accepted; workers are always started with fork+exec
  --role NAME                      ROLE_NAME of the workers (default "default")
  --log_dir DIR                    per-rank stdout.log / stderr.log under DIR/attempt_N/RANK/
  -r, --redirects 0-3|LR:0-3,...   send stdout (1), stderr (2) or both (3) only to the log files
  -t, --tee 0-3|LR:0-3,...         also show redirected streams, with torchrun's [roleN]: prefix
  --local_ranks_filter 0,1,...     show only these local ranks on the terminal
  -m, --module                     PROGRAM is a Python module (python3 -u -m PROGRAM)
  --no_python                      run PROGRAM as is, even if it ends in .py
  --run_path                       run PROGRAM under python3 even if it does not end in .py
  --signals_to_handle SIG,...      signals that stop the job (default SIGTERM,SIGINT,SIGHUP,
                                   SIGQUIT); SIGUSR1/SIGUSR2 unless listed go to every worker
  --logs_specs, --event_log_handler accepted; mlrun writes its own logs (--log_dir) and summary
  --numa_binding node|socket|exclusive|core-complex  bind each worker's CPUs and memory to its
                                   GPU's NUMA node (torch 2.8's modes)
  --virtual_local_rank             each worker sees only its GPU, as device 0, with LOCAL_RANK=0
  Every torchrun option not given is read from PET_<OPTION> (PET_NNODES, PET_NODE_RANK, ...).

mpirun / DeepSpeed options:
  --hostfile FILE, -H host[:slots],...  -np N  --include SPEC  --exclude SPEC  -x VAR[=VALUE]
  --include host:1,3               these GPUs of host: its workers get CUDA_VISIBLE_DEVICES=1,3
  --num_gpus N, --num_nodes N      DeepSpeed's: GPUs 0..N-1 on each node; the first N hosts

mlrun options:
  --backend auto|nccl|gloo|mpi     communication backend (default auto)
  --iface NAME|auto                network interface for the backend (default auto)
  --launcher auto|local|ssh|slurm  how nodes are reached (default auto: -H/--hostfile over SSH,
                                   inside a Slurm allocation its nodes through srun)
  --launcher sim                   simulate each -H/--hostfile node with a real agent on this
                                   machine, named after the host (tests, benchmarks; docs/scale.md)
  --tree_width N                   past N hosts over SSH, start agents as a tree N wide: the head
                                   on N hosts, each of their agents on the next N (default 32)
  --store mlrun|torch              who serves PyTorch's TCPStore at MASTER_ADDR:MASTER_PORT: mlrun's
                                   rendezvous server (default) or worker rank 0 (PyTorch's own)
  --grace_period S                 seconds between SIGTERM and SIGKILL at teardown (default 5;
                                   torchrun's --shutdown_timeout, TORCH_ELASTIC_SHUTDOWN_TIMEOUT)
  --stdin rank0|none               give this terminal or input to global rank 0 (default rank0)
  --dry-run                        print the plan and start nothing
  -v, --verbose, -vv               say what mlrun does: -v each step of a launch, -vv every detail
  --log_level LEVEL                debug, info, warning (default), error, critical or off; also
                                   MLRUN_LOG_LEVEL or torchrun's LOGLEVEL in the environment
  -h, --help, --version
)";
}

}  // namespace mlrun
