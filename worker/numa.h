// NUMA binding of workers to the CPUs and memory near their GPU: torchrun 2.8's --numa_binding
// (torch/numa/binding.py), computed from sysfs instead of CUDA, applied by the spawner between
// fork and exec (worker/process.h). docs/launcher.md, "NUMA binding".
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mlrun {

/// torch's AffinityMode.
enum class NumaMode {
  kNode,         ///< Every CPU of the GPU's NUMA node.
  kSocket,       ///< Every CPU of every NUMA node on the GPU's socket.
  kExclusive,    ///< The node's physical cores split evenly between the node's GPUs.
  kCoreComplex,  ///< One last-level-cache group of the node's cores per GPU.
};
std::optional<NumaMode> parse_numa_mode(std::string_view text);
std::string_view numa_mode_name(NumaMode mode);

/// What the binding needs to know of a machine, read from sysfs (read_numa_machine).
struct NumaMachine {
  /// NVIDIA GPUs in PCI bus order (nvidia-smi's numbering; CUDA's with
  /// CUDA_DEVICE_ORDER=PCI_BUS_ID): their PCI address and NUMA node (-1 read as 0, as torch).
  struct Gpu {
    std::string pci;
    int numa_node = 0;
  };
  std::vector<Gpu> gpus;
  std::map<int, std::vector<int>> node_cpus;  ///< NUMA node -> its CPUs (node*/cpulist).
  std::map<int, int> cpu_package;             ///< CPU -> socket (topology/physical_package_id).
  std::map<int, int> cpu_core;                ///< CPU -> lowest CPU of its thread siblings.
  std::map<int, int> cpu_llc;                 ///< CPU -> lowest CPU sharing its last cache.
};

/// Reads the machine under root ("/" in production; tests point it at a fake tree): PCI
/// devices with vendor 0x10de and a display class under ROOT/sys/bus/pci/devices, NUMA nodes
/// under ROOT/sys/devices/system/node, CPU topology and caches under
/// ROOT/sys/devices/system/cpu. Missing files leave their part empty.
NumaMachine read_numa_machine(const std::string& root);

/// One worker's binding.
struct NumaBinding {
  int gpu = -1;                ///< The physical GPU index it follows.
  int numa_node = -1;          ///< That GPU's NUMA node.
  std::vector<int> cpus;       ///< CPU affinity.
  std::vector<int> mem_nodes;  ///< Memory policy: preferred node(s).
};

/// The bindings of workers whose GPUs are worker_gpus (physical indices, local rank order),
/// among node_gpus (every GPU this node's workers can see, for exclusive and core-complex), for
/// a launcher allowed to run on allowed_cpus. Throws std::runtime_error with a message that
/// names the cause (no GPU, no NUMA node, a GPU index the machine lacks, too few cores).
std::vector<NumaBinding> plan_numa_binding(const NumaMachine& machine, NumaMode mode,
                                           const std::vector<int>& worker_gpus,
                                           const std::vector<int>& node_gpus,
                                           const std::vector<int>& allowed_cpus);

/// One line for `mlrun doctor`: the NUMA nodes with their CPUs and each GPU's node, or why
/// --numa_binding cannot work here.
std::string describe_numa(const NumaMachine& machine);

/// "0-3,8,10-11" <-> {0,1,2,3,8,10,11}. parse_cpu_list returns nullopt on malformed text.
std::optional<std::vector<int>> parse_cpu_list(std::string_view text);
std::string format_cpu_list(const std::vector<int>& cpus);

/// This process's CPU affinity (sched_getaffinity).
std::vector<int> current_cpu_affinity();

}  // namespace mlrun
