#include "launcher/options.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdint>
#include <functional>
#include <string_view>

#include <fmt/format.h>

#include "launcher/flags.h"
#include "launcher/option_env.h"
#include "rendezvous/endpoint.h"

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

using Errors = std::vector<std::string>;
using Apply = std::function<void(const std::string& flag, const std::string& value)>;

void bad(Errors& errors, const std::string& flag, const std::string& value, std::string_view why) {
  errors.push_back(fmt::format("{}={}: {}", flag, value, why));
}

// The setters of the table: each writes one field of the options (held by reference) and names
// the flag and its value in an error.
Apply int_in_range(int& field, int minimum, int maximum, Errors& e) {
  return [&field, &e, minimum, maximum](const std::string& flag, const std::string& v) {
    int n;
    if (!parse_integer(v, n) || n < minimum || n > maximum) {
      bad(e, flag, v,
          fmt::format("must be an integer from {} to {} (mlrun's limit)", minimum, maximum));
      return;
    }
    field = n;
  };
}

Apply text(std::string& field) {
  return [&field](const std::string&, const std::string& v) { field = v; };
}

// The hosts or their file: an empty value (`-H "$HOSTS"` with HOSTS unset) is an error, not a
// silent one-node job on this machine.
Apply not_empty(std::string& field, std::string_view what, Errors& e) {
  return [&field, &e, what](const std::string&, const std::string& v) {
    if (v.empty()) {
      e.push_back(fmt::format("{} is empty (an unset variable?)", what));
      return;
    }
    field = v;
  };
}

// torchrun's comma list (parse_comma_list).
Apply comma_list(std::vector<std::string>& field) {
  return [&field](const std::string&, const std::string& v) { field = parse_comma_list(v); };
}

Apply set(bool& field) {
  return [&field](const std::string&, const std::string&) { field = true; };
}

Apply one_of(std::string& field, std::vector<std::string_view> allowed, Errors& e) {
  return [&field, &e, allowed](const std::string& f, const std::string& v) {
    for (auto a : allowed) {
      if (v == a) {
        field = v;
        return;
      }
    }
    bad(e, f, v, fmt::format("must be one of {}", fmt::join(allowed, ", ")));
  };
}

// A finite number of seconds up to kMaxSeconds: inf, nan or 1e300 would turn a bounded wait
// into none at all (or overflow the milliseconds it becomes).
Apply seconds(double& field, Errors& e) {
  return [&field, &e](const std::string& f, const std::string& v) {
    double d;
    if (!parse_double(v, d) || !(d >= 0 && d <= kMaxSeconds)) {
      bad(e, f, v,
          fmt::format("must be a number of seconds from 0 to {} (mlrun's limit)", kMaxSeconds));
      return;
    }
    field = d;
  };
}

// "3" or "0:1,1:2": torchrun's Std values per local rank.
Apply stream_spec(StreamSpec& field, Errors& e) {
  return [&field, &e](const std::string& f, const std::string& v) {
    StreamSpec spec;
    int mask;
    if (parse_integer(v, mask)) {
      if (mask < 0 || mask > 3)
        return bad(e, f, v, "must be 0 (none), 1 (stdout), 2 (stderr) or 3 (both)");
      spec.all = mask;
      field = spec;
      return;
    }
    for (auto item : split(v, ',')) {
      auto parts = split(item, ':');
      int local_rank;
      if (parts.size() != 2 || !parse_integer(parts[0], local_rank) || local_rank < 0 ||
          local_rank >= kMaxNprocPerNode || !parse_integer(parts[1], mask) || mask < 0 ||
          mask > 3) {
        return bad(e, f, v, "must be 0-3 or a list of LOCAL_RANK:0-3 (for example 0:3,1:2)");
      }
      spec.per_rank.emplace_back(local_rank, mask);
    }
    field = spec;
  };
}

Apply nproc(Options& o, Errors& e) {
  return [&o, &e](const std::string& f, const std::string& v) {
    int n;
    if (v == "auto" || v == "gpu" || v == "cpu" ||
        (parse_integer(v, n) && n >= 1 && n <= kMaxNprocPerNode)) {
      o.nproc_per_node = v;
      o.nproc_given = true;
      return;
    }
    bad(e, f, v,
        fmt::format(
            "must be a positive integer (at most {}, mlrun's limit) or one of auto, gpu, cpu",
            kMaxNprocPerNode));
  };
}

Apply nnodes(Options& o, Errors& e) {
  return [&o, &e](const std::string& f, const std::string& v) {
    auto parts = split(v, ':');
    int lo, hi;
    if (parts.size() == 1 && parse_integer(parts[0], lo) && lo >= 1 && lo <= kMaxNodes) {
      o.nnodes_min = o.nnodes_max = lo;
    } else if (parts.size() == 2 && parse_integer(parts[0], lo) && parse_integer(parts[1], hi) &&
               lo >= 1 && hi >= lo && hi <= kMaxNodes) {
      o.nnodes_min = lo;
      o.nnodes_max = hi;
    } else {
      bad(e, f, v,
          fmt::format("must be N or MIN:MAX with 1 <= MIN <= MAX <= {} (mlrun's limit)",
                      kMaxNodes));
    }
  };
}

// HOST:PORT or [V6]:PORT; a bare host takes torchrun's c10d port, 29400 (torchrun's
// parse_rendezvous_endpoint), as `--rdzv_endpoint=$MASTER_ADDR` does there.
Apply rdzv_endpoint(std::string& field, Errors& e) {
  return [&field, &e](const std::string& f, const std::string& v) {
    // Empty: none, as torchrun (PET_RDZV_ENDPOINT=""). Port 0: any free one, as torchrun's
    // --standalone writes it (localhost:0).
    bool any_port = v.ends_with(":0") && parse_endpoint(v.substr(0, v.size() - 1) + "1");
    if (v.empty() || any_port || parse_endpoint(v)) {
      field = v;
      return;
    }
    std::size_t colons = static_cast<std::size_t>(std::count(v.begin(), v.end(), ':'));
    std::string with_port = make_endpoint(v, kTorchrunRdzvPort);
    if ((colons == 0 || (colons >= 2 && v.front() != '[')) && parse_endpoint(with_port)) {
      field = with_port;
      return;
    }
    bad(e, f, v,
        "must be HOST:PORT, [IPV6]:PORT or a host (port 29400, as torchrun), the port 0-65535");
  };
}

Apply port(int& field, Errors& e) {
  return [&field, &e](const std::string& f, const std::string& v) {
    if (!parse_integer(v, field, 0, 65535)) bad(e, f, v, "must be a port, 0-65535");
  };
}

Apply local_ranks(std::optional<std::vector<int>>& field, Errors& e) {
  return [&field, &e](const std::string& f, const std::string& v) {
    std::vector<int> ranks;
    for (auto item : split(v, ',')) {
      int r;
      if (!parse_integer(item, r) || r < 0 || r >= kMaxNprocPerNode) {
        return bad(e, f, v, "must be a comma list of local ranks");
      }
      ranks.push_back(r);
    }
    field = ranks;
  };
}

Apply export_var(std::vector<std::string>& exports, Errors& e) {
  return [&exports, &e](const std::string&, const std::string& v) {
    std::string_view name = std::string_view(v).substr(0, v.find('='));
    bool ok = !name.empty() && !std::isdigit(static_cast<unsigned char>(name.front())) &&
              std::all_of(name.begin(), name.end(), [](char c) {
                return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
              });
    if (!ok) {
      e.push_back(fmt::format("-x {}: must be VAR or VAR=VALUE, VAR a variable's name", v));
      return;
    }
    exports.push_back(v);
  };
}

// The first flag of a group carries the group's heading in the help.
FlagTable headed(std::string heading, FlagTable flags) {
  flags.front().group = std::move(heading);
  return flags;
}

// torchrun's flags: the job's shape and rendezvous.
FlagTable torchrun_job_flags(Options& o, Errors& e) {
  return headed(
      "torchrun options (either spelling: --nproc_per_node or --nproc-per-node):",
      {
          {{"--nproc_per_node"}, "N|auto|gpu|cpu", "workers on this node (default 1)", nproc(o, e)},
          {{"--nnodes"}, "N|MIN:MAX", "nodes in the job (default 1)", nnodes(o, e)},
          {{"--node_rank"},
           "R",
           "this node's rank (static rendezvous)",
           int_in_range(o.node_rank, 0, kMaxNodes - 1, e)},
          {{"--master_addr"}, "A", "where PyTorch's rank 0 listens", text(o.master_addr)},
          {{"--master_port"}, "P", "its port (default: a free port)", port(o.master_port, e)},
          {{"--rdzv_backend"},
           "static|c10d|mlrun",
           "static (--node_rank) or elastic membership",
           one_of(o.rdzv_backend, {"static", "c10d", "mlrun"}, e)},
          {{"--rdzv_endpoint"},
           "HOST:PORT",
           "where the elastic rendezvous is served",
           rdzv_endpoint(o.rdzv_endpoint, e)},
          {{"--rdzv_id"}, "ID", "the job's id in the rendezvous", text(o.rdzv_id)},
          {{"--rdzv_conf"},
           "KEY=VALUE,...",
           "join_timeout, last_call_timeout, heartbeat_interval, heartbeat_timeout (seconds)",
           text(o.rdzv_conf)},
          {{"--standalone"}, "", "one node, its rendezvous on loopback", set(o.standalone)},
          {{"--local_addr"}, "ADDR", "accepted", text(o.local_addr)},
          {{"--max_restarts"},
           "N",
           "restart the whole group up to N times after a failure",
           int_in_range(o.max_restarts, 0, kMaxRestarts, e)},
          {{"--monitor_interval"},
           "S",
           "accepted; mlrun sees a worker's exit at once",
           seconds(o.monitor_interval, e)},
          {{"--start_method"},
           "M",
           "accepted; workers are always started with fork+exec",
           one_of(o.start_method, {"spawn", "fork", "forkserver"}, e)},
          {{"--role"}, "NAME", "ROLE_NAME of the workers (default \"default\")", text(o.role)},
      });
}

// torchrun's flags: the workers' output, program and signals.
FlagTable torchrun_worker_flags(Options& o, Errors& e) {
  return {
      {{"--log_dir"},
       "DIR",
       "per-rank stdout.log / stderr.log under DIR/attempt_N/RANK/",
       text(o.log_dir)},
      {{"--redirects", "-r"},
       "0-3|LR:0-3,...",
       "send stdout (1), stderr (2) or both (3) only to the log files",
       stream_spec(o.redirects, e)},
      {{"--tee", "-t"},
       "0-3|LR:0-3,...",
       "also show redirected streams, with torchrun's [roleN]: prefix",
       stream_spec(o.tee, e)},
      {{"--local_ranks_filter"},
       "0,1,...",
       "show only these local ranks on the terminal",
       local_ranks(o.local_ranks_filter, e)},
      {{"--duplicate_stdout_filters"},
       "S,...",
       "also write tee'd stdout lines holding one of these to DIR/attempt_N/filtered_stdout.log",
       comma_list(o.duplicate_stdout_filters)},
      {{"--duplicate_stderr_filters"},
       "S,...",
       "the same for stderr, to DIR/attempt_N/filtered_stderr.log",
       comma_list(o.duplicate_stderr_filters)},
      {{"--module", "-m"}, "", "PROGRAM is a Python module (python3 -u -m PROGRAM)", set(o.module)},
      {{"--no_python"}, "", "run PROGRAM as is, even if it ends in .py", set(o.no_python)},
      {{"--run_path"},
       "",
       "run PROGRAM under python3 even if it does not end in .py",
       set(o.run_path)},
      {{"--signals_to_handle"},
       "SIG,...",
       "signals that stop the job (default SIGTERM,SIGINT,SIGHUP,SIGQUIT); SIGUSR1/SIGUSR2 "
       "unless listed go to every worker",
       text(o.signals_to_handle)},
      {{"--logs_specs"},
       "SPEC",
       "accepted; mlrun writes its own logs (--log_dir) and summary",
       text(o.logs_specs)},
      {{"--event_log_handler"}, "NAME", "accepted, as --logs_specs", text(o.event_log_handler)},
      {{"--numa_binding"},
       "node|socket|exclusive|core-complex",
       "bind each worker's CPUs and memory to its GPU's NUMA node (torch 2.8's modes)",
       one_of(o.numa_binding, {"node", "socket", "exclusive", "core-complex"}, e)},
      {{"--virtual_local_rank"},
       "",
       "each worker sees only its GPU, as device 0, with LOCAL_RANK=0",
       set(o.virtual_local_rank)},
  };
}

FlagTable mpirun_flags(Options& o, Errors& e) {
  return headed(
      "mpirun / DeepSpeed options:",
      {
          {{"--hostfile", "--machinefile"},
           "FILE",
           "the hosts, one a line, with their slots",
           not_empty(o.hostfile, "--hostfile: the file name", e)},
          {{"--hosts", "--host", "-H"},
           "HOST[:SLOTS],...",
           "the hosts, on the command line",
           not_empty(o.hosts, "-H: the host list", e)},
          {{"-np", "-n", "--np"},
           "N",
           "ranks in all, filling the hosts' slots in order",
           int_in_range(o.np, 1, kMaxWorldSize, e)},
          {{"--include", "-i"},
           "SPEC",
           "only these hosts; host:1,3: these GPUs of host, its workers get "
           "CUDA_VISIBLE_DEVICES=1,3",
           text(o.include)},
          {{"--exclude", "-e"}, "SPEC", "all hosts (or GPUs, host:1,3) but these", text(o.exclude)},
          {{"-x"},
           "VAR[=VALUE]",
           "give every worker VAR (this environment's, or VALUE)",
           export_var(o.exports, e)},
          {{"--num_gpus", "--num_accelerators"},
           "N",
           "DeepSpeed's: GPUs 0..N-1 on each node",
           int_in_range(o.num_gpus, 1, kMaxNprocPerNode, e)},
          {{"--num_nodes"},
           "N",
           "DeepSpeed's: the first N hosts",
           int_in_range(o.num_nodes, 1, kMaxNodes, e)},
      });
}

FlagTable mlrun_flags(Options& o, Errors& e) {
  return headed(
      "mlrun options:",
      {
          {{"--backend"},
           "auto|nccl|gloo|mpi",
           "communication backend (default auto)",
           one_of(o.backend, {"auto", "nccl", "gloo", "mpi"}, e)},
          {{"--iface"},
           "NAME|auto",
           "network interface for the backend (default auto)",
           text(o.iface)},
          {{"--launcher"},
           "auto|local|ssh|slurm|sim",
           "how nodes are reached (default auto: -H/--hostfile over SSH, inside a Slurm "
           "allocation its nodes through srun); sim: simulate each -H/--hostfile node with a "
           "real agent on this machine, named after the host (tests, benchmarks; docs/scale.md)",
           one_of(o.launcher, {"auto", "local", "ssh", "slurm", "sim"}, e)},
          {{"--tree_width"},
           "N",
           "past N hosts over SSH (or simulated, --launcher sim), start agents as a tree N "
           "wide: the head on N hosts, each of their agents on the next N (default 32)",
           int_in_range(o.tree_width, 2, kMaxNodes, e)},
          {{"--store"},
           "mlrun|torch",
           "who serves PyTorch's TCPStore at MASTER_ADDR:MASTER_PORT: mlrun's rendezvous server "
           "(default) or worker rank 0 (PyTorch's own)",
           one_of(o.store, {"mlrun", "torch"}, e)},
          // torchrun 2.x's name for the same period.
          {{"--grace_period", "--shutdown_timeout"},
           "S",
           "seconds between SIGTERM and SIGKILL at teardown (default 5; "
           "TORCH_ELASTIC_SHUTDOWN_TIMEOUT)",
           seconds(o.grace_period, e)},
          {{"--stdin"},
           "rank0|none",
           "give this terminal or input to global rank 0 (default rank0)",
           one_of(o.stdin_mode, {"rank0", "0", "none"}, e)},
          {{"--dry_run"}, "", "print the plan and start nothing", set(o.dry_run)},
      });
}

FlagTable output_flags(Options& o) {
  return {
      {{"--verbose", "-v"},
       "",
       "say what mlrun does: each step of a launch (info)",
       [&o](const std::string&, const std::string&) { ++o.verbose; }},
      {{"-vv"},
       "",
       "every detail, with its timing (debug)",
       [&o](const std::string&, const std::string&) { o.verbose += 2; }},
      {{"--log_level"},
       "LEVEL",
       "debug, info, warning (default), error, critical or off; also MLRUN_LOG_LEVEL or "
       "torchrun's LOGLEVEL in the environment",
       text(o.log_level)},
      {{"--help", "-h"}, "", "this text", set(o.help)},
      {{"--version"}, "", "mlrun's version", set(o.version)},
  };
}

// Options only the head acts on; an agent gets its node's share of them in other form.
bool is_head_only(const Flag& flag) {
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
  return std::find(head_only.begin(), head_only.end(), flag.names.front()) != head_only.end();
}

// What every applied flag adds besides its field: its place in the agents' argv.
void record_for_agents(Options& o, const Flag& flag, const std::string& value) {
  if (is_head_only(flag)) return;
  o.node_args.push_back(flag.names.front());
  if (flag.takes_value()) o.node_args.push_back(value);
}

// The checks of the options as a whole, once every flag is applied.
void check_options(const Options& o, Errors& errors) {
  if (o.program.empty()) {
    errors.push_back("no program to run (usage: mlrun [options] PROGRAM [ARGS...])");
  }
  const std::string nnodes = as_given(o, "--nnodes", std::to_string(o.nnodes_max));
  if (o.node_rank >= o.nnodes_max) {
    errors.push_back(fmt::format("{} must be less than {}",
                                 as_given(o, "--node_rank", std::to_string(o.node_rank)), nnodes));
  }
  if (int n; parse_integer(o.nproc_per_node, n) &&
             static_cast<std::int64_t>(n) * o.nnodes_max > kMaxWorldSize) {
    errors.push_back(fmt::format("{} {}: a world of {} ranks is more than the limit of {}",
                                 as_given(o, "--nproc_per_node", o.nproc_per_node), nnodes,
                                 static_cast<std::int64_t>(n) * o.nnodes_max, kMaxWorldSize));
  }
  if (o.module && o.no_python) {
    errors.push_back(fmt::format("{} runs a Python module and cannot be used with {}",
                                 as_given(o, "--module", ""), as_given(o, "--no_python", "")));
  }
}

const FlagSyntax kLaunchSyntax = {
    [](const std::string& arg) {
      return fmt::format("unknown option '{}' (see mlrun --help)", arg);
    },
    [](const std::string& written, const Flag&) {
      return fmt::format("option '{}' needs a value", canonical_flag(written));
    },
    [](const std::string& written, const Flag&) {
      return fmt::format("option '{}' takes no value", canonical_flag(written));
    },
    true,
};

}  // namespace

FlagTable launch_flag_table(Options& o, std::vector<std::string>& e) {
  return concat({torchrun_job_flags(o, e), torchrun_worker_flags(o, e), mpirun_flags(o, e),
                 mlrun_flags(o, e), output_flags(o)});
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
  Errors errors;
  const FlagTable table = launch_flag_table(o, errors);
  std::vector<const Flag*> given;
  std::size_t program = parse_flags(
      table, args, kLaunchSyntax, errors, [&](const Flag& flag, const std::string& value) {
        record_for_agents(o, flag, value);
        given.push_back(&flag);
        o.sources.push_back({flag.names.front(), value, "command line"});
      });
  if (program < args.size()) {
    o.program = args[program];
    o.program_args.assign(args.begin() + static_cast<long>(program) + 1, args.end());
  }
  if (getenv) {
    apply_environment(
        table, o, errors, given, getenv,
        [&o](const Flag& flag, const std::string& value) { record_for_agents(o, flag, value); });
  }
  if (!o.help && !o.version) check_options(o, errors);
  for (auto& e : errors) result.errors.push_back({std::move(e)});
  return result;
}

std::string usage() {
  Options o;
  Errors e;
  return "usage: mlrun [options] PROGRAM [ARGS...]\n"
         "\n"
         "Starts PROGRAM as a group of distributed workers with RANK, WORLD_SIZE, MASTER_ADDR and "
         "the\n"
         "rest of torchrun's environment. PROGRAM ending in .py runs under python3 -u (or "
         "$PYTHON).\n"
         "Every torchrun option not given is read from PET_<OPTION> (PET_NNODES, PET_NODE_RANK, "
         "...).\n"
         "\n" +
         flags_usage(launch_flag_table(o, e));
}

}  // namespace mlrun
