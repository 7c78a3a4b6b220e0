// The hosts of a -H / --hostfile / Slurm job and each one's share of the ranks (plan_hosts,
// declared in launcher/head.h with the head that starts their agents).
#include <arpa/inet.h>

#include <algorithm>
#include <optional>
#include <vector>

#include <fmt/format.h>

#include "launcher/head.h"
#include "launcher/plan.h"
#include "transport/slurm_env.h"
#include "worker/net.h"
#include "worker/network.h"

namespace mlrun {

// DeepSpeed's --num_nodes (the first N hosts) and --num_gpus (GPUs 0..N-1 of each), which
// DeepSpeed refuses together with --include/--exclude.
static std::optional<std::string> apply_deepspeed_counts(const Options& o,
                                                         std::vector<HostEntry>& hosts) {
  if ((o.num_nodes > 0 || o.num_gpus > 0) && (!o.include.empty() || !o.exclude.empty())) {
    return "--num_nodes/--num_gpus and --include/--exclude both choose GPUs: give one of them "
           "(as DeepSpeed's launcher)";
  }
  if (o.num_nodes > static_cast<int>(hosts.size())) {
    return fmt::format("--num_nodes={}: the hosts are only {}", o.num_nodes, hosts.size());
  }
  if (o.num_nodes > 0) hosts.resize(o.num_nodes);
  for (auto& h : hosts) {
    if (o.num_gpus == 0) break;
    h.slots = o.num_gpus;
    h.slots_given = true;
    h.slot_ids.clear();
    for (int g = 0; g < o.num_gpus; ++g) h.slot_ids.push_back(g);
  }
  return std::nullopt;
}

namespace {

// The hosts named (--hostfile, -H) or, inside an allocation with none named, the allocation's
// nodes (--nnodes takes the first), after --include/--exclude and DeepSpeed's counts. False, with
// the errors in plan, when they cannot be chosen.
bool choose_hosts(const Options& o, bool allocation, HostList& list, HostPlan& plan) {
  list = allocation            ? transport::allocation_hosts(transport::read_slurm_env())
         : !o.hostfile.empty() ? read_hostfile(o.hostfile)
                               : parse_host_list(o.hosts);
  if (list.ok() && allocation && o.nnodes_max > 1) {
    if (o.nnodes_max > static_cast<int>(list.hosts.size())) {
      plan.errors.push_back(fmt::format("--nnodes={}: the allocation has {} node{}", o.nnodes_max,
                                        list.hosts.size(), list.hosts.size() == 1 ? "" : "s"));
      return false;
    }
    list.hosts.resize(o.nnodes_max);
  }
  if (list.ok()) list = apply_include_exclude(std::move(list.hosts), o.include, o.exclude);
  for (const auto& e : list.errors) plan.errors.push_back(format_error(e));
  if (!list.ok()) return false;
  if (auto e = apply_deepspeed_counts(o, list.hosts)) {
    plan.errors.push_back(*e);
    return false;
  }
  return true;
}

// In an allocation whose nodes have no task count, what needs every node's count first.
bool check_allocation_counts(const Options& o, bool allocation, int per_node, const HostList& list,
                             HostPlan& plan) {
  if (o.backend == "mpi" && allocation && per_node == 0 && !list.hosts.front().slots_given) {
    plan.errors.push_back(
        "--backend mpi in a Slurm allocation: mpirun needs every node's rank count before it "
        "starts: give --nproc_per_node (or allocate with --ntasks-per-node)");
    return false;
  }
  if (o.np > 0 && allocation && per_node == 0 && list.hosts.front().slots_given == false) {
    plan.errors.push_back(fmt::format(
        "-np {}: the allocation's nodes have no task count (allocate with --ntasks-per-node or "
        "-n) and their GPUs are counted only on the nodes: give --nproc_per_node",
        o.np));
    return false;
  }
  return true;
}

// -np's workers, filled host by host, in order, as mpirun does; hosts left with nothing are not
// used.
bool fill_np(const Options& o, int total, HostPlan& plan) {
  if (o.np <= 0) return true;
  if (o.np > total) {
    plan.errors.push_back(
        fmt::format("-np {}: the hosts have only {} slot{}", o.np, total, total == 1 ? "" : "s"));
    return false;
  }
  int left = o.np;
  std::vector<NodePlan> used;
  for (auto& n : plan.nodes) {
    if (left == 0) break;
    n.nproc = std::min(n.nproc, left);
    left -= n.nproc;
    used.push_back(std::move(n));
  }
  plan.nodes = std::move(used);
  return true;
}

// A node's GPUs (--include host:2,3, --num_gpus) are its first workers' ones; and this machine is
// listed once at most.
void check_gpus_and_locals(HostPlan& plan) {
  for (auto& n : plan.nodes) {
    auto& ids = n.host.slot_ids;
    if (ids.empty()) continue;
    if (n.nproc > static_cast<int>(ids.size())) {
      plan.errors.push_back(fmt::format("{}: {} workers but GPUs {} only: one GPU per worker",
                                        n.host.host, n.nproc, fmt::join(ids, ",")));
    } else {
      ids.resize(n.nproc);
    }
  }
  int locals = 0;
  for (const auto& n : plan.nodes) locals += n.local;
  if (locals > 1) {
    plan.errors.push_back(
        "more than one listed host is this machine (localhost and its own name or address?): "
        "list it once");
  }
}

}  // namespace

HostPlan plan_hosts(const Options& o, const std::function<bool(const std::string&)>& is_local) {
  HostPlan plan;
  HostList list;
  if (!o.hostfile.empty() && !o.hosts.empty()) {
    plan.errors.push_back("--hostfile and -H both name the hosts: give one of them");
    return plan;
  }
  // Inside an allocation with no hosts named, the allocation's nodes; --nnodes takes the first.
  const bool allocation = o.launcher == "slurm" && o.hostfile.empty() && o.hosts.empty();
  if (!choose_hosts(o, allocation, list, plan)) return plan;
  int per_node = 0;
  if (o.nproc_given && !parse_integer(o.nproc_per_node, per_node, 1)) {
    plan.errors.push_back(
        fmt::format("{}: give a number with --hostfile or -H (each host counts its own)",
                    as_given(o, "--nproc_per_node", o.nproc_per_node)));
    return plan;
  }
  int total = 0;
  for (const auto& h : list.hosts) {
    // Slurm's nodes without a task count run as many workers as the agent finds GPUs (0 here).
    int nproc = per_node > 0 ? per_node : allocation && !h.slots_given ? 0 : h.slots;
    // Under Slurm every node, this one too, gets an agent through srun.
    NodePlan n{h, nproc, o.launcher != "slurm" && o.launcher != "sim" && is_local(h.host)};
    total += n.nproc;
    plan.nodes.push_back(std::move(n));
  }
  if (!check_allocation_counts(o, allocation, per_node, list, plan)) return plan;
  if (!fill_np(o, total, plan)) return plan;
  check_gpus_and_locals(plan);
  return plan;
}

bool is_local_host(const std::string& host) {
  if (host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0) return true;
  if (host == host_name()) return true;
  unsigned char bytes[16];
  int family = inet_pton(AF_INET, host.c_str(), bytes) == 1    ? AF_INET
               : inet_pton(AF_INET6, host.c_str(), bytes) == 1 ? AF_INET6
                                                               : 0;
  if (family == 0) return false;
  for (const auto& i : this_host_interfaces()) {
    for (const auto& a : i.addresses) {
      if (a.family == family && std::memcmp(a.bytes, bytes, family == AF_INET ? 4 : 16) == 0) {
        return true;
      }
    }
  }
  return false;
}

const std::vector<NetInterface>& this_host_interfaces() {
  // Only what the interface choice can use (list_interfaces): a head with a veth per
  // container or host read each one's files in /sys.
  static const std::vector<NetInterface> interfaces = list_interfaces(/*all_details=*/false);
  return interfaces;
}

}  // namespace mlrun
