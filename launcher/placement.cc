#include "launcher/placement.h"

#include <cstdlib>
#include <stdexcept>

#include <fmt/format.h>

#include "launcher/plan.h"
#include "rendezvous/integer.h"
#include "worker/net.h"

namespace mlrun {
namespace {

std::vector<std::string> inherited_visible_devices() {
  std::vector<std::string> out;
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  if (v == nullptr || *v == '\0') return out;
  std::string_view rest = v;
  while (true) {
    auto comma = rest.find(',');
    std::string item(rest.substr(0, comma));
    if (!item.empty()) out.push_back(item);
    if (comma == std::string_view::npos) return out;
    rest.remove_prefix(comma + 1);
  }
}

std::optional<int> as_index(const std::string& s) {
  int v = -1;
  if (!parse_integer(std::string_view(s), v, 0)) return std::nullopt;
  return v;
}

}  // namespace

std::string assign_gpus(const Options& o, LaunchPlan& plan, const std::vector<int>& ids) {
  std::vector<std::string> inherited = inherited_visible_devices();
  std::vector<std::string> list;
  for (int id : ids) {
    if (inherited.empty()) {
      list.push_back(std::to_string(id));
    } else if (id < static_cast<int>(inherited.size())) {
      list.push_back(inherited[id]);
    } else {
      return fmt::format(
          "{}: GPU {} was asked for, but CUDA_VISIBLE_DEVICES={} leaves this node {} GPU{}",
          host_name(), id, fmt::join(inherited, ","), inherited.size(),
          inherited.size() == 1 ? "" : "s");
    }
  }
  if (list.empty() && o.virtual_local_rank) {
    list = inherited;
    for (int i = 0; list.empty() && i < plan.nproc; ++i) list.push_back(std::to_string(i));
    for (int i = static_cast<int>(list.size()); inherited.empty() && i < plan.nproc; ++i) {
      list.push_back(std::to_string(i));
    }
  }
  if (!list.empty() && plan.nproc > static_cast<int>(list.size())) {
    return fmt::format("{}: {} workers but {} GPU{} ({}): one GPU per worker", host_name(),
                       plan.nproc, list.size(), list.size() == 1 ? "" : "s", fmt::join(list, ","));
  }
  plan.gpus = std::move(list);
  return {};
}

std::string plan_numa(const Options& o, LaunchPlan& plan) {
  plan.numa.clear();
  if (o.numa_binding.empty()) return {};
  auto mode = parse_numa_mode(o.numa_binding);
  if (!mode) return fmt::format("--numa_binding={}: unknown mode", o.numa_binding);
  // Each worker's physical GPU: the i-th of its node's list (torch's rule: LOCAL_RANK i uses
  // GPU i of those visible), which is i itself when nothing narrows them.
  std::vector<std::string> visible = !plan.gpus.empty() ? plan.gpus : inherited_visible_devices();
  std::vector<int> worker_gpus, node_gpus;
  for (const auto& v : visible) {
    auto index = as_index(v);
    if (!index) {
      return fmt::format(
          "--numa_binding: {}: GPU '{}' is not an index (a UUID or MIG name): mlrun finds a GPU's "
          "NUMA node from its PCI position, which needs indices in CUDA_VISIBLE_DEVICES",
          host_name(), v);
    }
    node_gpus.push_back(*index);
  }
  for (int lr = 0; lr < plan.nproc; ++lr) {
    worker_gpus.push_back(lr < static_cast<int>(node_gpus.size()) ? node_gpus[lr] : lr);
  }
  const char* root = std::getenv("MLRUN_SYSFS_ROOT");
  NumaMachine machine = read_numa_machine(root != nullptr && *root != '\0' ? root : "/");
  if (node_gpus.empty()) {
    for (int g = 0; g < static_cast<int>(machine.gpus.size()); ++g) node_gpus.push_back(g);
  }
  try {
    plan.numa = plan_numa_binding(machine, *mode, worker_gpus, node_gpus, current_cpu_affinity());
  } catch (const std::runtime_error& e) {
    return fmt::format("--numa_binding={}: {}: {}", o.numa_binding, host_name(), e.what());
  }
  return {};
}

std::string describe_placement(const LaunchPlan& plan, int lr) {
  std::string out;
  if (lr < static_cast<int>(plan.numa.size())) {
    const NumaBinding& b = plan.numa[lr];
    out = fmt::format("GPU {} on NUMA node {}: CPUs {}, memory preferred on node{} {}", b.gpu,
                      b.numa_node, format_cpu_list(b.cpus), b.mem_nodes.size() == 1 ? "" : "s",
                      fmt::join(b.mem_nodes, ","));
  }
  return out;
}

}  // namespace mlrun
