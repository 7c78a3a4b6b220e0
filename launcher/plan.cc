#include "launcher/plan.h"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include <fmt/format.h>

#include "coordinator/node.h"
#include "launcher/backend.h"
#include "launcher/command.h"
#include "launcher/log_dir.h"
#include "launcher/placement.h"
#include "transport/slurm_env.h"
#include "worker/cgroup.h"
#include "worker/hardware.h"
#include "worker/log.h"
#include "worker/net.h"

namespace mlrun {

namespace fs = std::filesystem;

std::string random_hex(std::size_t bytes) {
  std::string raw(bytes, '\0');
  std::size_t got = 0;
  while (got < bytes) {
    ssize_t n = getrandom(raw.data() + got, bytes - got, 0);
    if (n > 0) got += static_cast<std::size_t>(n);
  }
  std::string out;
  for (unsigned char c : raw) out += fmt::format("{:02x}", c);
  return out;
}

void error(std::string_view message) {
  fmt::print(stderr, "mlrun: error: {}\n", message);
}

bool on_hosts(const Options& o) {
  return !o.hostfile.empty() || !o.hosts.empty() || o.launcher == "slurm";
}

std::optional<std::string> choose_network(const Options& o, LaunchPlan& plan,
                                          const std::string& toward) {
  const auto& interfaces = this_host_interfaces();
  if (o.iface == "auto") {
    plan.iface = choose_interface(interfaces, toward);
  } else if (std::none_of(interfaces.begin(), interfaces.end(),
                          [&](const NetInterface& i) { return i.name == o.iface && i.up; })) {
    return fmt::format("--iface={}: no such interface is up on {}", o.iface, host_name());
  } else {
    plan.iface = {o.iface, fmt::format("{}: chosen with --iface", o.iface), {}, {}};
  }
  plan.network_defaults =
      network_variables(plan.iface.name, has_infiniband_device(), plan.iface.subnet);
  return std::nullopt;
}

// torchrun's plugin options name Python entry points that mlrun, not being Python, cannot load:
// say what it does instead, rather than refuse a torchrun command line.
static void print_plugin_notes(const Options& o) {
  if (!o.logs_specs.empty()) {
    fmt::print(stderr,
               "mlrun: note: --logs_specs={}: torchrun's LogsSpecs plugins are not loaded; mlrun "
               "writes per-rank logs itself (--log_dir DIR/attempt_N/RANK/, --redirects, --tee)\n",
               o.logs_specs);
  }
  if (o.event_log_handler != "null" && !o.event_log_handler.empty()) {
    fmt::print(stderr,
               "mlrun: note: --event_log_handler={}: torchelastic events are not emitted; mlrun "
               "prints one failure summary and writes TORCHELASTIC_ERROR_FILE per rank\n",
               o.event_log_handler);
  }
}

namespace {

// --hostfile/-H and Slurm: the hosts, and the options that only starting nodes one by one takes.
void check_hosts(const Options& o, LaunchPlan& plan, std::vector<std::string>& errors) {
  if (on_hosts(o)) {
    plan.hosts = plan_hosts(o, is_local_host);
    errors.insert(errors.end(), plan.hosts.errors.begin(), plan.hosts.errors.end());
    // In an allocation --nnodes=N takes its first N nodes.
    bool nnodes_allowed = o.launcher == "slurm" && o.hostfile.empty() && o.hosts.empty();
    std::vector<std::string> one_by_one;  // as the user set them (PET_NNODES in a pod)
    if (o.nnodes_max > 1 && !nnodes_allowed) {
      one_by_one.push_back(as_given(o, "--nnodes", std::to_string(o.nnodes_max)));
    }
    if (o.node_rank > 0) {
      one_by_one.push_back(as_given(o, "--node_rank", std::to_string(o.node_rank)));
    }
    if (!o.rdzv_endpoint.empty()) {
      one_by_one.push_back(as_given(o, "--rdzv_endpoint", o.rdzv_endpoint));
    }
    if (!one_by_one.empty()) {
      errors.push_back(fmt::format(
          "--hostfile/-H start every node from here: {} {} for starting nodes one by one",
          fmt::join(one_by_one, ", "), one_by_one.size() == 1 ? "is" : "are"));
    }
  }
  if (on_hosts(o)) {
    std::int64_t ranks = 0;
    for (const auto& n : plan.hosts.nodes) ranks += n.nproc;
    if (ranks > kMaxWorldSize) {
      errors.push_back(fmt::format("the hosts ask for {} ranks: more than the limit of {}", ranks,
                                   kMaxWorldSize));
    }
  }
  if (o.nnodes_min != o.nnodes_max && on_hosts(o)) {
    errors.push_back(fmt::format(
        "{}: elastic jobs are for nodes started one by one (torchrun style), not --hostfile/-H",
        as_given(o, "--nnodes", fmt::format("{}:{}", o.nnodes_min, o.nnodes_max))));
  }
}

// How many workers run on this node: --nproc_per_node, or DeepSpeed's --num_gpus, or -np.
// Counting this node's GPUs (`gpu`, `auto`) can fail here alone: that error goes to node_errors.
void count_workers(const Options& o, LaunchPlan& plan, std::vector<std::string>& errors,
                   std::vector<std::string>& node_errors) {
  try {
    plan.nproc = resolve_nproc_per_node(o.nproc_per_node);
  } catch (const std::exception& e) {
    node_errors.push_back(e.what() + origin_note(o, "--nproc_per_node"));
  }
  if (o.num_gpus > 0 && !on_hosts(o)) {
    // DeepSpeed's --num_gpus on one node: that many workers, on GPUs 0..N-1.
    if (o.nproc_given && plan.nproc != o.num_gpus) {
      errors.push_back(fmt::format("--num_gpus={} and {} disagree", o.num_gpus,
                                   as_given(o, "--nproc_per_node", o.nproc_per_node)));
    }
    plan.nproc = o.num_gpus;
    if (plan.gpu_ids.empty()) {
      for (int g = 0; g < o.num_gpus; ++g) plan.gpu_ids.push_back(g);
    }
  }
  if (o.num_nodes > 1 && !on_hosts(o)) {
    errors.push_back(fmt::format("--num_nodes={}: give the hosts (--hostfile or -H)", o.num_nodes));
  }
  if (o.standalone && o.nnodes_min > 1) {  // torchrun: a 600 s wait for nodes that cannot join
    errors.push_back(fmt::format(
        "{} runs one node, its rendezvous on loopback where no other node can join, but {} asks "
        "for more: drop --standalone and give every node --rdzv_endpoint",
        as_given(o, "--standalone", ""), as_given(o, "--nnodes", "")));
  }
  if (!on_hosts(o) && (!o.include.empty() || !o.exclude.empty())) {
    errors.push_back(
        "--include/--exclude choose among the hosts of --hostfile or -H (for this "
        "machine's GPUs: -H localhost:N --include localhost:1,3)");
  }
  if (!on_hosts(o) && o.np > 0 && o.np != plan.nproc) {
    if (o.nproc_per_node == "1") {
      plan.nproc = o.np;  // A single node: -np is the worker count.
    } else {
      errors.push_back(fmt::format("-np {} does not match {} on one node", o.np,
                                   as_given(o, "--nproc_per_node", o.nproc_per_node)));
    }
  }
}

// The workers' command line and the variables -x exports to them.
// Whether worker_environment sets `name` for every worker itself, over -x's value.
bool set_for_each_worker(const std::string& name) {
  static const std::vector<std::string> names = [] {
    GroupEnv g;  // With every optional part present (its backend, its rendezvous).
    g.backend = g.rdzv_endpoint = g.rdzv_token = "-";
    std::vector<std::string> out;
    for (const auto& kv : worker_environment(Environment(), g, 0, "-")) {
      out.push_back(kv.substr(0, kv.find('=')));
    }
    return out;
  }();
  return std::find(names.begin(), names.end(), name) != names.end();
}

void plan_command(const Options& o, LaunchPlan& plan, std::vector<std::string>& errors) {
  const char* python = std::getenv("PYTHON");
  const char* path = std::getenv("PATH");
  try {
    if (!o.program.empty()) {
      plan.argv = worker_command(o, python && *python ? python : "python3",
                                 path ? path : "/usr/local/bin:/usr/bin:/bin");
    }
  } catch (const SpawnError& e) {
    errors.push_back(e.what());
  }
  for (const auto& x : o.exports) {
    auto eq = x.find('=');
    if (eq != std::string::npos) {
      plan.exports.emplace_back(x.substr(0, eq), x.substr(eq + 1));
    } else if (const char* v = std::getenv(x.c_str())) {
      plan.exports.emplace_back(x, v);
    } else {
      errors.push_back(fmt::format("-x {}: no such variable in mlrun's environment", x));
      continue;
    }
    // worker_environment sets these over the exports: say so rather than drop the value.
    const std::string& name = plan.exports.back().first;
    if (set_for_each_worker(name)) {
      fmt::print(stderr,
                 "mlrun: warning: -x {}: mlrun sets {} for each worker itself; the value given is "
                 "not used\n",
                 name, name);
    }
  }
}

// The Slurm head runs no workers (but mpirun's, --backend mpi): it has no interface of its own
// to choose (each agent chooses its node's, and says there what is wrong with --iface), so no
// lookup of a node's name and no interface scan on the start's critical path, before srun.
bool slurm_head_runs_none(const Options& o) {
  return o.launcher == "slurm" && o.backend != "mpi";
}

// The master's address, and the address the job's traffic goes toward.
std::string plan_master(const Options& o, LaunchPlan& plan) {
  // Where the job's traffic goes, for the interface choice: the master, else the rendezvous
  // endpoint's host (nodes joining by endpoint), else this host (one node).
  std::string endpoint_host;
  int endpoint_port = 0;
  if (!o.rdzv_endpoint.empty()) split_endpoint(o.rdzv_endpoint, endpoint_host, endpoint_port);
  plan.master_addr = !o.master_addr.empty()   ? o.master_addr
                     : !endpoint_host.empty() ? endpoint_host
                                              : "127.0.0.1";
  std::string toward = plan.master_addr;
  // Simulated nodes (--launcher sim) are processes on this machine: their names are not
  // looked up, which waited for the resolver (~6 s where the name server does not answer).
  if (on_hosts(o) && o.master_addr.empty() && !slurm_head_runs_none(o) && o.launcher != "sim") {
    // From here to the other hosts: this host's address on the route to the first of them
    // (a name only ~/.ssh/config knows is settled once SSH has connected: launch_on_hosts).
    for (const auto& n : plan.hosts.nodes) {
      if (n.local) continue;
      try {
        // mpirun's own traffic under Slurm: a node's name may be known to Slurm only.
        bool by_slurm = o.launcher == "slurm";
        toward =
            local_address_toward(by_slurm ? transport::resolve_node(n.host.host) : n.host.host);
      } catch (const std::exception&) {
      }
      break;
    }
  }
  return toward;
}

void plan_local_devices(const Options& o, LaunchPlan& plan, std::vector<std::string>& errors) {
  // This host's workers: their GPUs and, with --numa_binding, CPUs and memory.
  for (const auto& n : plan.hosts.nodes) {
    if (!n.local) continue;
    plan.nproc = n.nproc;
    if (plan.gpu_ids.empty()) plan.gpu_ids = n.host.slot_ids;
  }
  if (!on_hosts(o) || std::any_of(plan.hosts.nodes.begin(), plan.hosts.nodes.end(),
                                  [](const NodePlan& n) { return n.local; })) {
    if (auto e = assign_gpus(o, plan, plan.gpu_ids); !e.empty()) {
      errors.push_back(e);
    } else if (auto numa = plan_numa(o, plan); !numa.empty()) {
      errors.push_back(numa);
    }
  }
}

// What follows from a plan without errors: world size, backend, ids and log files.
void finish_plan(const Options& o, LaunchPlan& plan) {
  // Every node runs as many workers as this one when the nodes are launched one by one; the
  // real world size comes from the rendezvous.
  plan.world_size = plan.nproc * o.nnodes_max;
  if (on_hosts(o)) {
    plan.world_size = 0;
    for (const auto& n : plan.hosts.nodes) plan.world_size += n.nproc;
  }
  // The same choice `mlrun doctor` explains.
  // NCCL is looked for (a dlopen of a 200 MB library) only where it makes the choice.
  int gpus = count_gpus();
  plan.backend =
      choose_backend(o.backend, gpus, o.backend == "auto" && gpus > 0 && nccl_available()).name;
  // Nodes started one by one share nothing but their command lines: their job id is
  // torchrun's --rdzv_id (default "none"), the same on every node.
  plan.job_id = !o.rdzv_id.empty()                 ? o.rdzv_id
                : o.nnodes_max > 1 && !on_hosts(o) ? "none"
                                                   : random_hex(6);
  plan.run_id = o.rdzv_id.empty() ? (o.standalone ? plan.job_id : "none") : o.rdzv_id;
  plan.hostname = host_name();
  plan.log_dir = o.log_dir;
  // Without --log_dir, redirected streams still need files: a fresh directory, made at launch.
  plan.log_files = !o.log_dir.empty() || o.redirects.all || !o.redirects.per_rank.empty() ||
                   o.tee.all || !o.tee.per_rank.empty();
}

}  // namespace

std::string first_error_reason(const std::vector<std::string>& errors) {
  if (errors.empty()) return "";
  std::string why = errors.front();
  if (errors.size() > 1) why += fmt::format(" (and {} more)", errors.size() - 1);
  return why;
}

// Collects every user error of the command line (errors: the parser's) and of the environment,
// and reports them together, before anything runs.
bool plan_launch(const Options& o, LaunchPlan& plan, std::vector<std::string> errors) {
  check_hosts(o, plan, errors);
  for (auto& e : parse_rdzv_conf(o.rdzv_conf, plan.rdzv)) {
    errors.push_back(e + origin_note(o, "--rdzv_conf"));
  }
  std::vector<std::string> signal_errors;
  plan.signals = make_signal_policy(o.signals_to_handle, signal_errors);
  for (auto& e : signal_errors) errors.push_back(e + origin_note(o, "--signals_to_handle"));
  if (leave_sighup_ignored(plan.signals)) {
    log::debug("SIGHUP was ignored when mlrun started (nohup): it stays ignored");
  }
  // What follows the command line's own errors can differ from node to node (LaunchPlan::
  // node_errors): files, environment, GPUs, interfaces.
  std::vector<std::string> node_errors;
  count_workers(o, plan, errors, node_errors);
  const std::size_t usage = errors.size();
  errors.insert(errors.end(), node_errors.begin(), node_errors.end());
  // After an unknown option the program's place is a guess: the option's value ("--bind-to
  // none") was taken for it, and "none: command not found" would only mislead.
  bool unknown_option =
      std::any_of(errors.begin(), errors.begin() + static_cast<long>(usage),
                  [](const std::string& e) { return e.starts_with("unknown option"); });
  if (!unknown_option) plan_command(o, plan, errors);
  std::string toward = plan_master(o, plan);
  if (!slurm_head_runs_none(o)) {
    if (auto e = choose_network(o, plan, toward)) errors.push_back(*e);
  }
  if (auto problem = log_dir_problem(o.log_dir); !problem.empty()) errors.push_back(problem);
  plan_local_devices(o, plan, errors);
  for (const auto& e : errors) error(e);
  if (!errors.empty()) {
    plan.errors = errors;
    if (usage == 0) plan.node_errors = std::move(errors);
    return false;
  }
  if (!plan.iface.warning.empty()) fmt::print(stderr, "mlrun: warning: {}\n", plan.iface.warning);
  // A filter that names no local rank of this node shows nothing at all, as torchrun's.
  if (const auto& only = o.local_ranks_filter;
      only && !on_hosts(o) && plan.nproc > 0 &&
      std::none_of(only->begin(), only->end(), [&](int r) { return r < plan.nproc; })) {
    fmt::print(stderr,
               "mlrun: warning: --local_ranks_filter={}: this node runs local ranks 0-{}, so no "
               "worker's output is shown\n",
               fmt::join(*only, ","), plan.nproc - 1);
  }
  print_plugin_notes(o);
  finish_plan(o, plan);
  return true;
}

// The workers' environment that is the same on every node and in every attempt.
GroupEnv env_template(const Options& o, const LaunchPlan& plan) {
  GroupEnv g;
  g.nnodes = o.nnodes_max;
  g.local_world_size = plan.nproc;
  g.world_size = plan.world_size;
  g.master_addr = plan.master_addr;
  g.max_restarts = o.max_restarts;
  g.run_id = plan.run_id;
  g.role = o.role;
  g.job_id = plan.job_id;
  g.backend = plan.backend;
  g.agent_store = o.store == "mlrun";
  g.overrides = plan.exports;
  g.defaults = plan.network_defaults;
  // PyTorch 1.x and 2.x names for NCCL's asynchronous error handling, as torchrun sets them.
  g.defaults.emplace_back("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1");
  g.defaults.emplace_back("NCCL_ASYNC_ERROR_HANDLING", "1");
  // As torchrun's launch_agent sets it for its workers (torch's own signal handling reads it).
  g.overrides.emplace_back("TORCHELASTIC_SIGNALS_TO_HANDLE", o.signals_to_handle);
  g.gpus = plan.gpus;
  g.virtual_local_rank = o.virtual_local_rank;
  // A GPU's index means its PCI position to NUMA binding, as to nvidia-smi: CUDA must agree.
  if (!plan.numa.empty()) g.defaults.emplace_back("CUDA_DEVICE_ORDER", "PCI_BUS_ID");
  return g;
}

std::string error_file(const std::string& dir, int attempt, int rank) {
  return fmt::format("{}/attempt_{}/{}/error.json", dir, attempt, rank);
}

void print_option_sources(const Options& o) {
  fmt::print("options (any other has its default):\n");
  for (const auto& src : o.sources) {
    // Quoted where it must be: a value with a newline could fake a line of the plan.
    std::string setting =
        src.value.empty() ? src.option : fmt::format("{}={}", src.option, shell_word(src.value));
    fmt::print("  {:<36} from {}\n", setting, src.origin);
  }
}

std::string store_line(const Options& o) {
  if (o.store == "torch") {
    return "store: --store torch: worker rank 0 serves PyTorch's TCPStore on MASTER_PORT";
  }
  std::string line =
      "store: --store mlrun: mlrun's rendezvous server is PyTorch's TCPStore at "
      "MASTER_ADDR:MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE=True; no worker binds it)";
  // mpirun starts the ranks: the launcher serves their store (mpi/launch.cc).
  if (o.backend == "mpi") line += "; served by this launcher, passed to every rank with mpirun -x";
  return line;
}

void print_dry_run(const Options& o, const LaunchPlan& plan) {
  GroupEnv g = env_template(o, plan);
  g.node_rank = o.node_rank;
  g.rank_offset = o.node_rank * plan.nproc;
  g.master_port = o.master_port;
  // One node's store is mlrun's server on loopback (NodeCoordinator::master_address).
  if (o.nnodes_max == 1 && o.store == "mlrun") g.master_addr = "127.0.0.1";
  fmt::print("mlrun: dry run: 1 node, {} worker{}, world size {}, backend {}\n", plan.nproc,
             plan.nproc == 1 ? "" : "s", plan.world_size, plan.backend);
  print_option_sources(o);
  fmt::print("transport: local ({})\n", o.launcher_why);
  fmt::print("teardown: {}\n", probe_cgroup_support().describe());
  fmt::print("node {} ({}): ranks {}-{}, interface {}\n", o.node_rank, plan.hostname, g.rank_offset,
             g.rank_offset + plan.nproc - 1, plan.iface.reason);
  fmt::print("{}\n", store_line(o));
  Environment empty;
  for (int lr = 0; lr < plan.nproc; ++lr) {
    fmt::print("  rank {} (local rank {}): {}\n", g.rank_offset + lr, lr, shell_words(plan.argv));
    if (auto where = describe_placement(plan, lr); !where.empty()) {
      fmt::print("    (bound: {})\n", where);
    }
    // The error file of the global rank, under --log_dir, else under the directory made at
    // launch; the master port, when not given, is chosen at launch too.
    std::string errors =
        error_file(o.log_dir.empty() ? "LOG_DIR" : o.log_dir, 0, g.rank_offset + lr);
    for (const auto& kv : worker_environment(empty, g, lr, errors)) {
      auto eq = kv.find('=');
      std::string name = kv.substr(0, eq);
      if (name == "MLRUN_RDZV_TOKEN") {
        fmt::print("    MLRUN_RDZV_TOKEN=(secret)\n");
      } else if (name == "MASTER_PORT" && o.master_port == 0) {
        fmt::print("    MASTER_PORT=(chosen at launch)\n");
      } else {
        fmt::print("    {}={}\n", shell_word(name), shell_word(kv.substr(eq + 1)));
      }
    }
  }
}

namespace {

// The attempt's file of a --duplicate_*_filters option, opened once for all of this node's
// ranks: DIR/attempt_N/filtered_stdout.log, as torchrun 2.x names it.
std::shared_ptr<const DuplicateLog> duplicate_log(std::shared_ptr<const DuplicateLog>& open,
                                                  const std::vector<std::string>& needles,
                                                  const std::string& path) {
  if (!open) {
    int fd = open_log_file(path);
    if (fd < 0) {
      fmt::print(stderr, "mlrun: warning: {}: no filtered log (a symlink, or not ours?): {}\n",
                 path, std::strerror(errno));
    }
    open = std::make_shared<const DuplicateLog>(fd, needles);
  }
  return open;
}

}  // namespace

WorkerRoutes routes_for(const Options& o, const LaunchPlan& plan, const std::string& run_dir,
                        int attempt, const WorkerSpec& w, DuplicateLogs& duplicates) {
  WorkerRoutes r;
  if (duplicates.attempt != attempt) duplicates = DuplicateLogs{attempt, nullptr, nullptr};
  int redirected = o.redirects.for_local_rank(w.local_rank);
  int teed = o.tee.for_local_rank(w.local_rank);
  bool shown =
      !o.local_ranks_filter || std::find(o.local_ranks_filter->begin(), o.local_ranks_filter->end(),
                                         w.local_rank) != o.local_ranks_filter->end();
  // torchrun's console prefix where its --tee is used, mlrun's "[rank] " otherwise.
  std::string prefix = (o.tee.all || !o.tee.per_rank.empty())
                           ? fmt::format("[{}{}]:", o.role, w.local_rank)
                           : fmt::format("[{}] ", w.rank);
  auto route = [&](int stream_bit, int console_fd, const char* file) {
    StreamRoute s;
    if (shown && (!(redirected & stream_bit) || (teed & stream_bit))) s.console_fd = console_fd;
    s.prefix = prefix;
    s.keep_tail = stream_bit == 2;
    if (plan.log_files) {
      std::string path = fmt::format("{}/attempt_{}/{}/{}", run_dir, attempt, w.rank, file);
      if (!make_rank_dir(run_dir, attempt, w.rank) || (s.file_fd = open_log_file(path)) < 0) {
        fmt::print(stderr, "mlrun: warning: {}: no log file (a symlink, or not ours?): {}\n", path,
                   std::strerror(errno));
      }
      // As torchrun: lines of the streams that are tee'd and shown (the rank directory above
      // made the attempt's).
      const auto& needles =
          stream_bit == 1 ? o.duplicate_stdout_filters : o.duplicate_stderr_filters;
      if (shown && (teed & stream_bit) && !needles.empty()) {
        s.duplicate =
            duplicate_log(stream_bit == 1 ? duplicates.out : duplicates.err, needles,
                          fmt::format("{}/attempt_{}/filtered_{}", run_dir, attempt, file));
      }
    }
    return s;
  };
  r.out = route(1, STDOUT_FILENO, "stdout.log");
  r.err = route(2, STDERR_FILENO, "stderr.log");
  return r;
}

std::string read_token_file(const std::string& path, std::string& why) {
  std::ifstream in(path);
  if (!in) {
    why = fmt::format("{}: {}", path, std::strerror(errno));
    return {};
  }
  std::ostringstream text;
  text << in.rdbuf();
  std::string token = text.str();
  while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
  struct stat st;
  if (token.empty()) {
    why = fmt::format("{}: empty", path);
  } else if (stat(path.c_str(), &st) == 0 && (st.st_mode & 077) != 0) {
    why = fmt::format("{} is readable by other users (chmod 600 it)", path);
  }
  return token;
}

std::optional<std::string> weak_token(const std::string& token) {
  bool seen[256] = {};
  std::size_t distinct = 0;
  for (unsigned char c : token) distinct += seen[c] ? 0 : (seen[c] = true, 1);
  if (token.size() >= kMinTokenChars && distinct >= kMinTokenDistinctChars) return std::nullopt;
  return fmt::format(
      "the token is too weak ({} characters, {} different; at least {} and {} needed): anyone "
      "who guesses it can join or abort the job",
      token.size(), distinct, kMinTokenChars, kMinTokenDistinctChars);
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string shell_word(const std::string& s) {
  auto safe = [](unsigned char c) {
    return std::isalnum(c) || std::strchr("_@%+=:,./-", c) != nullptr;
  };
  if (!s.empty() && std::all_of(s.begin(), s.end(), safe)) return s;
  auto control = [](unsigned char c) { return c < 0x20 || c == 0x7f; };
  if (std::none_of(s.begin(), s.end(), control)) return shell_quote(s);
  // A newline or other control character printed as is could fake a line of the plan: bash's
  // $'...' spells each one as an escape.
  std::string out = "$'";
  for (unsigned char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (control(c)) {
      out += fmt::format("\\x{:02x}", c);
    } else if (c == '\\' || c == '\'') {
      out += '\\';
      out += static_cast<char>(c);
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "'";
}

std::string shell_words(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : " ") + shell_word(w);
  return out;
}

std::string self_path() {
  // Read once: the head asks for each host's agent command line. A binary replaced while the
  // job runs reads "PATH (deleted)" later; the path it started from stays the right one.
  static const std::string path = [] {
    std::error_code ec;
    auto p = fs::read_symlink("/proc/self/exe", ec);
    return ec ? std::string("mlrun") : p.string();
  }();
  return path;
}

}  // namespace mlrun
