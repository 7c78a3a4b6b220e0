#include "worker/numa.h"

#include <sched.h>

#include <algorithm>
#include <filesystem>
#include <set>
#include <stdexcept>

#include <fmt/format.h>

#include "rendezvous/integer.h"

#include "worker/text_file.h"

namespace mlrun {
namespace {

namespace fs = std::filesystem;

std::optional<std::string> read_text(const fs::path& path) {
  auto text = read_text_file(path.string());
  if (!text) return std::nullopt;
  std::string s = std::move(*text);
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

std::optional<int> read_int(const fs::path& path) {
  return read_int_file(path.string());
}

// 0x10de is NVIDIA; class 0x03xxxx is a display controller (0x0300 VGA, 0x0302 3D).
bool is_nvidia_gpu(const fs::path& device) {
  auto vendor = read_text(device / "vendor");
  auto klass = read_text(device / "class");
  return vendor && klass && *vendor == "0x10de" && klass->rfind("0x03", 0) == 0;
}

// Lowest CPU sharing the highest-level data or unified cache with cpu, or cpu itself.
int last_level_cache_of(const fs::path& cpu_dir, int cpu) {
  int best_level = -1;
  int leader = cpu;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(cpu_dir / "cache", ec)) {
    std::string name = entry.path().filename().string();
    if (name.rfind("index", 0) != 0) continue;
    auto type = read_text(entry.path() / "type");
    auto level = read_int(entry.path() / "level");
    auto shared = read_text(entry.path() / "shared_cpu_list");
    if (!type || !level || !shared || (*type != "Unified" && *type != "Data")) continue;
    auto cpus = parse_cpu_list(*shared);
    if (!cpus || cpus->empty() || *level <= best_level) continue;
    best_level = *level;
    leader = cpus->front();
  }
  return leader;
}

std::vector<int> intersect(const std::vector<int>& a, const std::vector<int>& b) {
  std::vector<int> out;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(out));
  return out;
}

// Groups cpus by key(cpu), groups in ascending key order.
template <typename Key>
std::vector<std::vector<int>> group_by(const std::vector<int>& cpus, Key key) {
  std::map<int, std::vector<int>> groups;
  for (int c : cpus) groups[key(c)].push_back(c);
  std::vector<std::vector<int>> out;
  for (auto& [k, v] : groups) out.push_back(std::move(v));
  return out;
}

int lookup(const std::map<int, int>& m, int cpu) {
  auto it = m.find(cpu);
  return it == m.end() ? cpu : it->second;
}

}  // namespace

std::optional<NumaMode> parse_numa_mode(std::string_view text) {
  if (text == "node") return NumaMode::kNode;
  if (text == "socket") return NumaMode::kSocket;
  if (text == "exclusive") return NumaMode::kExclusive;
  if (text == "core-complex" || text == "core_complex") return NumaMode::kCoreComplex;
  return std::nullopt;
}

std::string_view numa_mode_name(NumaMode mode) {
  switch (mode) {
    case NumaMode::kNode:
      return "node";
    case NumaMode::kSocket:
      return "socket";
    case NumaMode::kExclusive:
      return "exclusive";
    case NumaMode::kCoreComplex:
      return "core-complex";
  }
  return "?";
}

std::optional<std::vector<int>> parse_cpu_list(std::string_view text) {
  std::vector<int> out;
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  if (text.empty()) return out;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t comma = text.find(',', start);
    std::string_view item =
        text.substr(start, comma == std::string_view::npos ? text.npos : comma - start);
    std::size_t dash = item.find('-');
    int lo = 0, hi = 0;
    auto parse = [](std::string_view s, int& v) { return parse_integer(s, v, 0); };
    if (dash == std::string_view::npos) {
      if (!parse(item, lo)) return std::nullopt;
      hi = lo;
    } else if (!parse(item.substr(0, dash), lo) || !parse(item.substr(dash + 1), hi) || hi < lo ||
               hi - lo > (1 << 16)) {
      return std::nullopt;
    }
    for (int c = lo; c <= hi; ++c) out.push_back(c);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string format_cpu_list(const std::vector<int>& cpus) {
  std::string out;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    out +=
        fmt::format("{}{}", out.empty() ? "" : ",",
                    i == j ? fmt::format("{}", cpus[i]) : fmt::format("{}-{}", cpus[i], cpus[j]));
    i = j + 1;
  }
  return out;
}

std::string describe_numa(const NumaMachine& m) {
  if (m.node_cpus.empty()) return "no NUMA node in sysfs: --numa_binding cannot work here";
  std::vector<std::string> nodes;
  for (const auto& [node, cpus] : m.node_cpus) {
    nodes.push_back(fmt::format("{}: CPUs {}", node, format_cpu_list(cpus)));
  }
  std::string out = fmt::format("{} node{} ({})", m.node_cpus.size(),
                                m.node_cpus.size() == 1 ? "" : "s", fmt::join(nodes, "; "));
  if (m.gpus.empty()) return out + "; no NVIDIA GPU: --numa_binding has nothing to follow";
  std::vector<std::string> gpus;
  for (std::size_t g = 0; g < m.gpus.size(); ++g) {
    gpus.push_back(fmt::format("GPU {} ({}) on node {}", g, m.gpus[g].pci, m.gpus[g].numa_node));
  }
  return fmt::format("{}; {}", out, fmt::join(gpus, ", "));
}

std::vector<int> current_cpu_affinity() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) out.push_back(c);
  }
  return out;
}

NumaMachine read_numa_machine(const std::string& root) {
  NumaMachine m;
  fs::path base = root.empty() ? fs::path("/") : fs::path(root);
  std::error_code ec;
  std::vector<std::string> pci;
  for (const auto& entry : fs::directory_iterator(base / "sys/bus/pci/devices", ec)) {
    if (is_nvidia_gpu(entry.path())) pci.push_back(entry.path().filename().string());
  }
  std::sort(pci.begin(), pci.end());  // "0000:17:00.0": text order is bus order.
  for (const auto& p : pci) {
    int node = read_int(base / "sys/bus/pci/devices" / p / "numa_node").value_or(-1);
    m.gpus.push_back({p, std::max(node, 0)});
  }
  for (const auto& entry : fs::directory_iterator(base / "sys/devices/system/node", ec)) {
    std::string name = entry.path().filename().string();
    int node = 0;
    if (name.rfind("node", 0) != 0 || !parse_integer(std::string_view(name).substr(4), node)) {
      continue;
    }
    if (auto text = read_text(entry.path() / "cpulist")) {
      if (auto cpus = parse_cpu_list(*text)) m.node_cpus[node] = *cpus;
    }
  }
  for (const auto& [node, cpus] : m.node_cpus) {
    for (int c : cpus) {
      fs::path dir = base / fmt::format("sys/devices/system/cpu/cpu{}", c);
      if (auto pkg = read_int(dir / "topology/physical_package_id")) m.cpu_package[c] = *pkg;
      if (auto text = read_text(dir / "topology/thread_siblings_list")) {
        if (auto sib = parse_cpu_list(*text); sib && !sib->empty()) m.cpu_core[c] = sib->front();
      }
      m.cpu_llc[c] = last_level_cache_of(dir, c);
    }
  }
  return m;
}

namespace {

// What a binding may use: the machine, and the CPUs this launcher may run on (sorted).
struct Allowed {
  const NumaMachine& m;
  std::vector<int> cpus;

  std::vector<int> on(int node) const {
    auto it = m.node_cpus.find(node);
    return it == m.node_cpus.end() ? std::vector<int>() : intersect(it->second, cpus);
  }
  int node_of(int gpu) const {
    if (gpu < 0 || gpu >= static_cast<int>(m.gpus.size())) {
      throw std::runtime_error(fmt::format("GPU {} does not exist: this machine has {} GPU{}", gpu,
                                           m.gpus.size(), m.gpus.size() == 1 ? "" : "s"));
    }
    return m.gpus[gpu].numa_node;
  }
};

// Where gpu stands among the GPUs that share its NUMA node (node_gpus, in index order), and how
// many those are.
struct Peers {
  std::size_t index = 0;
  std::size_t count = 0;
};

Peers peers_of(const Allowed& a, int gpu, int node, const std::vector<int>& node_gpus) {
  std::vector<int> peers;
  for (int g : node_gpus) {
    if (a.node_of(g) == node) peers.push_back(g);
  }
  std::sort(peers.begin(), peers.end());
  if (std::find(peers.begin(), peers.end(), gpu) == peers.end()) {
    peers.insert(std::upper_bound(peers.begin(), peers.end(), gpu), gpu);
  }
  auto index = static_cast<std::size_t>(std::find(peers.begin(), peers.end(), gpu) - peers.begin());
  return {index, peers.size()};
}

// socket: every allowed CPU of the GPU's package, memory from each of its nodes.
void bind_socket(const Allowed& a, const std::vector<int>& node_cpus, NumaBinding& b) {
  int socket = lookup(a.m.cpu_package, node_cpus.front());
  b.mem_nodes.clear();
  for (const auto& [node, cpus] : a.m.node_cpus) {
    auto mine = a.on(node);
    if (mine.empty() || lookup(a.m.cpu_package, mine.front()) != socket) continue;
    b.cpus.insert(b.cpus.end(), mine.begin(), mine.end());
    b.mem_nodes.push_back(node);
  }
  std::sort(b.cpus.begin(), b.cpus.end());
}

// exclusive: the node's physical cores shared out among its GPUs, none shared.
void bind_exclusive(const Allowed& a, const std::vector<int>& node_cpus, Peers peers,
                    NumaBinding& b) {
  auto cores = group_by(node_cpus, [&](int c) { return lookup(a.m.cpu_core, c); });
  std::size_t n = peers.count, per = cores.size() / n, extra = cores.size() % n;
  if (per < 1) {
    throw std::runtime_error(
        fmt::format("--numa_binding=exclusive: NUMA node {} has {} physical core{} for its {} GPUs",
                    b.numa_node, cores.size(), cores.size() == 1 ? "" : "s", n));
  }
  // As torch: the lowest GPU indices get one core more when the split is uneven.
  std::size_t index = peers.index;
  std::size_t start = index * per + std::min(index, extra);
  std::size_t end = start + per + (index < extra ? 1 : 0);
  for (std::size_t k = start; k < end; ++k) {
    b.cpus.insert(b.cpus.end(), cores[k].begin(), cores[k].end());
  }
  std::sort(b.cpus.begin(), b.cpus.end());
}

// core-complex: one group of CPUs sharing a last-level cache per GPU.
std::vector<int> core_complex_cpus(const Allowed& a, const std::vector<int>& node_cpus,
                                   Peers peers) {
  auto groups = group_by(node_cpus, [&](int c) { return lookup(a.m.cpu_llc, c); });
  // Larger groups first, then lower CPUs (torch's order); GPUs wrap around them.
  std::stable_sort(groups.begin(), groups.end(),
                   [](const auto& x, const auto& y) { return x.size() > y.size(); });
  return groups[peers.index % groups.size()];
}

}  // namespace

std::vector<NumaBinding> plan_numa_binding(const NumaMachine& m, NumaMode mode,
                                           const std::vector<int>& worker_gpus,
                                           const std::vector<int>& node_gpus,
                                           const std::vector<int>& allowed_cpus) {
  if (m.gpus.empty()) {
    throw std::runtime_error(
        "no NVIDIA GPU in /sys/bus/pci/devices: NUMA binding follows each worker's GPU (as "
        "torchrun's does); leave --numa_binding out on this machine");
  }
  if (m.node_cpus.empty()) {
    throw std::runtime_error(
        "no NUMA node in /sys/devices/system/node (a kernel without NUMA support?)");
  }
  Allowed allowed{m, allowed_cpus};
  std::sort(allowed.cpus.begin(), allowed.cpus.end());
  std::vector<NumaBinding> out;
  for (int gpu : worker_gpus) {
    NumaBinding b;
    b.gpu = gpu;
    b.numa_node = allowed.node_of(gpu);
    std::vector<int> node_cpus = allowed.on(b.numa_node);
    if (node_cpus.empty()) {
      throw std::runtime_error(
          fmt::format("GPU {} ({}) is on NUMA node {}, where mlrun may run on no CPU (allowed: {})",
                      gpu, m.gpus[gpu].pci, b.numa_node, format_cpu_list(allowed.cpus)));
    }
    b.mem_nodes = {b.numa_node};
    Peers peers = peers_of(allowed, gpu, b.numa_node, node_gpus);
    switch (mode) {
      case NumaMode::kNode:
        b.cpus = node_cpus;
        break;
      case NumaMode::kSocket:
        bind_socket(allowed, node_cpus, b);
        break;
      case NumaMode::kExclusive:
        bind_exclusive(allowed, node_cpus, peers, b);
        break;
      case NumaMode::kCoreComplex:
        b.cpus = core_complex_cpus(allowed, node_cpus, peers);
        break;
    }
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace mlrun
