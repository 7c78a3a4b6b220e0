#include "transport/slurm_env.h"

#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "hostfiles/slurm_lists.h"
#include "rendezvous/integer.h"
#include "worker/process.h"

namespace mlrun::transport {
namespace {

std::string value(const GetEnv& get, const char* name) {
  const char* v = get ? get(name) : std::getenv(name);
  return v != nullptr ? v : "";
}

// A step that runs more than one mlrun on a node (`srun -n 8 mlrun ...`, one task per GPU, as
// DeepSpeed's launcher starts them): every task there would take the node's rank and port. Every
// task says the same, unless the user gave --nnodes (and so placed each task).
std::optional<std::string> several_tasks_on_a_node(const Options& o, const SlurmEnv& s) {
  if (o.nnodes_min != 1 || o.nnodes_max != 1 || s.step_tasks_per_node.empty()) return std::nullopt;
  std::string error;
  std::vector<int> counts = expand_slurm_counts(s.step_tasks_per_node, &error);
  if (!error.empty()) return fmt::format("SLURM_STEP_TASKS_PER_NODE: {}", error);
  auto most = std::max_element(counts.begin(), counts.end());
  if (most == counts.end() || *most <= 1) return std::nullopt;
  std::vector<std::string> names = expand_slurm_hostlist(s.step_nodelist, &error);
  auto at = static_cast<std::size_t>(most - counts.begin());
  std::string where = at < names.size() ? fmt::format(" ({})", names[at]) : "";
  return fmt::format(
      "SLURM_STEP_TASKS_PER_NODE={}: this srun step runs {} tasks on a node{}, and mlrun runs "
      "once per node, starting the node's workers itself (--nproc_per_node): run `srun "
      "--ntasks-per-node=1 mlrun ...`, or mlrun alone inside the allocation (its agents go "
      "through srun), or give each task --nnodes and --node_rank",
      s.step_tasks_per_node, *most, where);
}

// The per-node mode: this mlrun is one task of `srun -N K mlrun ...`, one per node. What the
// user did not set comes from the step.
std::vector<std::string> fill_from_step(
    Options& o, const SlurmEnv& s, const std::function<std::string(const std::string&)>& resolve) {
  std::vector<std::string> errors;
  long long nodes = 0, node_id = 0;
  if (!parse_integer(s.step_num_nodes, nodes) || nodes < 1) {
    errors.push_back(fmt::format("SLURM_STEP_NUM_NODES={}: not a node count", s.step_num_nodes));
  }
  if (!parse_integer(s.node_id, node_id) || node_id < 0 || node_id >= nodes) {
    errors.push_back(fmt::format("SLURM_NODEID={}: not a node of the step", s.node_id));
  }
  std::string error;
  auto names = expand_slurm_hostlist(s.step_nodelist, &error);
  if (!error.empty()) errors.push_back(fmt::format("SLURM_STEP_NODELIST: {}", error));
  if (!errors.empty()) return errors;
  o.launcher = "local";
  o.launcher_why =
      fmt::format("inside Slurm step {}.{} on {} nodes: this is node {} of them (per-node mode)",
                  s.job_id, s.step_id, nodes, node_id);
  // Flags the user gave win; an unset one has its default here.
  if (o.nnodes_min == 1 && o.nnodes_max == 1) o.nnodes_min = o.nnodes_max = static_cast<int>(nodes);
  if (o.node_rank == 0) o.node_rank = static_cast<int>(node_id);
  if (o.rdzv_id.empty()) o.rdzv_id = fmt::format("slurm-{}.{}", s.job_id, s.step_id);
  o.slurm_step = fmt::format("{}.{}", s.job_id, s.step_id);
  if (o.master_addr.empty() && o.rdzv_endpoint.empty()) o.master_addr = resolve(names.front());
  if (o.master_port == 0 && o.rdzv_endpoint.empty()) o.master_port = step_port(s.job_id, s.step_id);
  return errors;
}

}  // namespace

SlurmEnv read_slurm_env(const GetEnv& get) {
  SlurmEnv s;
  s.job_id = value(get, "SLURM_JOB_ID");
  if (s.job_id.empty()) s.job_id = value(get, "SLURM_JOBID");
  s.step_id = value(get, "SLURM_STEP_ID");
  s.nodelist = value(get, "SLURM_JOB_NODELIST");
  if (s.nodelist.empty()) s.nodelist = value(get, "SLURM_NODELIST");
  s.tasks_per_node = value(get, "SLURM_TASKS_PER_NODE");
  s.ntasks_given =
      !value(get, "SLURM_NTASKS").empty() || !value(get, "SLURM_NTASKS_PER_NODE").empty();
  s.step_nodelist = value(get, "SLURM_STEP_NODELIST");
  s.step_num_nodes = value(get, "SLURM_STEP_NUM_NODES");
  s.step_tasks_per_node = value(get, "SLURM_STEP_TASKS_PER_NODE");
  s.node_id = value(get, "SLURM_NODEID");
  return s;
}

std::vector<std::string> choose_launcher(
    Options& o, const SlurmEnv& s, const std::function<std::string(const std::string&)>& resolve) {
  const bool host_flags = !o.hostfile.empty() || !o.hosts.empty();
  const std::string flag = host_flags ? (o.hostfile.empty() ? "-H" : "--hostfile") : "";
  if (o.launcher == "local") {
    o.launcher_why = "--launcher local";
    if (host_flags) return {fmt::format("--launcher local runs on this host only: drop {}", flag)};
    return {};
  }
  if (o.launcher == "ssh") {
    if (!host_flags) return {"--launcher ssh needs the hosts: give --hostfile or -H"};
    o.launcher_why = fmt::format("--launcher ssh, hosts from {}", flag);
    return {};
  }
  if (o.launcher == "slurm") {
    if (!s.in_allocation()) {
      return {
          "--launcher slurm: not inside a Slurm allocation (no SLURM_JOB_ID): run mlrun "
          "under salloc or in an sbatch script"};
    }
    o.launcher_why = host_flags
                         ? fmt::format("--launcher slurm, nodes from {}", flag)
                         : fmt::format("--launcher slurm, the nodes of allocation {}", s.job_id);
    return {};
  }
  // auto: hosts named on the command line go over SSH; inside an srun step, one mlrun per node;
  // inside an allocation, its nodes through srun; else this host.
  if (host_flags) {
    o.launcher = "ssh";
    o.launcher_why = fmt::format("hosts from {}", flag);
    return {};
  }
  if (s.in_step()) {
    if (auto why = several_tasks_on_a_node(o, s)) return {std::move(*why)};
    long long nodes = 0;
    if (parse_integer(s.step_num_nodes, nodes) && nodes == 1) {
      o.launcher = "local";
      o.launcher_why = fmt::format("inside Slurm step {}.{} on one node", s.job_id, s.step_id);
      return {};
    }
    return fill_from_step(o, s, resolve);
  }
  // Flags of nodes started one by one (torchrun style) keep mlrun on this node.
  const bool by_hand = o.node_rank != 0 || !o.rdzv_endpoint.empty() || !o.master_addr.empty() ||
                       o.standalone || o.nnodes_min != o.nnodes_max;
  if (s.in_allocation() && !by_hand) {
    o.launcher = "slurm";
    o.launcher_why = fmt::format(
        "inside Slurm allocation {} (SLURM_JOB_ID) with no --hostfile/-H: its nodes, agents "
        "through srun",
        s.job_id);
    return {};
  }
  o.launcher = "local";
  o.launcher_why = s.in_allocation() ? "inside a Slurm allocation, but --node_rank, "
                                       "--master_addr, --rdzv_endpoint, --standalone or "
                                       "--nnodes=MIN:MAX start this node only"
                                     : "no --hostfile/-H and not inside a Slurm allocation";
  return {};
}

int step_port(const std::string& job_id, const std::string& step_id) {
  long long job = 0, step = 0;
  parse_integer(job_id, job);
  parse_integer(step_id, step);
  return 10000 + static_cast<int>((job * 64 + step) % 20000);
}

HostList allocation_hosts(const SlurmEnv& s) {
  HostList list;
  std::string error;
  auto names = expand_slurm_hostlist(s.nodelist, &error);
  if (!error.empty()) {
    list.errors.push_back({"SLURM_JOB_NODELIST", 0, error});
    return list;
  }
  std::vector<int> slots;
  if (s.ntasks_given) {
    slots = expand_slurm_counts(s.tasks_per_node, &error);
    if (!error.empty()) {
      list.errors.push_back({"SLURM_TASKS_PER_NODE", 0, error});
      return list;
    }
    if (slots.size() != names.size()) {
      list.errors.push_back({"SLURM_TASKS_PER_NODE", 0,
                             fmt::format("{} counts for the {} nodes of SLURM_JOB_NODELIST",
                                         slots.size(), names.size())});
      return list;
    }
  }
  for (std::size_t i = 0; i < names.size(); ++i) {
    HostEntry h;
    h.host = names[i];
    h.source = "SLURM_JOB_NODELIST";
    h.slots = slots.empty() ? 1 : slots[i];
    h.slots_given = !slots.empty();
    list.hosts.push_back(std::move(h));
  }
  return list;
}

std::string slurm_signal_note(const std::string& job_id) {
  return fmt::format(
      ", sent by Slurm to job {} (a scancel, the time limit, a preemption or a failed node)",
      job_id);
}

// How long a node that ends its step waits before it cancels the step (end_step_early).
constexpr std::chrono::milliseconds kStepOutputGrace{300};

void end_step_early(const Options& o) {
  if (o.slurm_step.empty() || o.nnodes_max < 2 || o.nnodes_min != o.nnodes_max) return;
  fmt::print(stderr,
             "mlrun: ending Slurm step {} (scancel {}): node {} failed before it "
             "joined the job, and the other nodes would wait for it up to the join timeout\n",
             o.slurm_step, o.slurm_step, o.node_rank);
  // The step's SIGTERM reaches this task too: it has said why it ends, and ends with its code.
  signal(SIGTERM, SIG_IGN);
  // Slurm's I/O forwarding needs a moment to carry the lines above (and the other tasks' lines)
  // to srun: a step cancelled at once lost every task's output in about one run of six
  // (tests/slurm/srun_node_fails.sh), which left the user without the reason.
  std::this_thread::sleep_for(kStepOutputGrace);
  // A cancel, not `scancel --signal=TERM`: that one goes straight to each node's slurmd, once,
  // and in two CI runs a task on a loaded node never ended (most likely it was still starting);
  // its node then waits up to the join timeout. A cancel is slurmctld's: the step ends on every
  // node (SIGTERM, then SIGKILL after KillWait).
  BoundedRun r;
  try {
    std::string path = std::getenv("PATH") ? std::getenv("PATH") : "";
    r = run_bounded({resolve_program("scancel", path), o.slurm_step}, 10);
  } catch (const SpawnError& e) {
    r.error = e.what();
  }
  // scancel is a process of the step too: the SIGTERM it sent may end it first.
  const bool sent = r.error.empty() && !r.timed_out &&
                    ((WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) ||
                     (WIFSIGNALED(r.status) && WTERMSIG(r.status) == SIGTERM));
  if (!sent) {
    fmt::print(stderr, "mlrun: warning: scancel {} failed{}: {}\n", o.slurm_step,
               r.timed_out ? " (no answer in 10 s)" : "", !r.error.empty() ? r.error : r.err);
  }
}

std::string resolve_node(const std::string& name) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(name.c_str(), nullptr, &hints, &found) == 0) {
    freeaddrinfo(found);
    return name;
  }
  try {
    std::string scontrol =
        resolve_program("scontrol", std::getenv("PATH") ? std::getenv("PATH") : "");
    BoundedRun r = run_bounded({scontrol, "show", "node", "-o", name}, 10);
    auto at = r.out.find(" NodeAddr=");
    if (at != std::string::npos) {
      auto start = at + 10;
      return r.out.substr(start, r.out.find_first_of(" \n", start) - start);
    }
  } catch (const SpawnError&) {
  }
  return name;
}

}  // namespace mlrun::transport
