// NUMA binding computed over fake sysfs trees: a 2-socket server with 4 NUMA nodes and 8 GPUs,
// and a 1-socket machine. The trees are files under a temporary root, read by
// read_numa_machine exactly as /sys is.
#include "worker/numa.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <gtest/gtest.h>

namespace mlrun {
namespace {

namespace fs = std::filesystem;

struct FakeSysfs {
  fs::path root;
  FakeSysfs() {
    // A memory file system where there is one: a tree is a few thousand small files.
    fs::path base =
        access("/dev/shm", W_OK) == 0 ? fs::path("/dev/shm") : fs::temp_directory_path();
    root = base / fmt::format("mlrun-numa-test-{}-{}", getpid(), counter()++);
    fs::create_directories(root);
  }
  ~FakeSysfs() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
  static int& counter() {
    static int n = 0;
    return n;
  }
  void write(const std::string& path, const std::string& text) {
    fs::path p = root / path;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text << "\n";
  }
  void gpu(const std::string& pci, int node, const std::string& klass = "0x030200") {
    write("sys/bus/pci/devices/" + pci + "/vendor", "0x10de");
    write("sys/bus/pci/devices/" + pci + "/class", klass);
    write("sys/bus/pci/devices/" + pci + "/numa_node", std::to_string(node));
  }
  // cpu: package, thread siblings, and its L1d / L3 caches.
  void cpu(int c, int package, const std::string& siblings, const std::string& l3) {
    std::string dir = fmt::format("sys/devices/system/cpu/cpu{}/", c);
    write(dir + "topology/physical_package_id", std::to_string(package));
    write(dir + "topology/thread_siblings_list", siblings);
    write(dir + "cache/index0/type", "Data");
    write(dir + "cache/index0/level", "1");
    write(dir + "cache/index0/shared_cpu_list", siblings);
    write(dir + "cache/index1/type", "Instruction");
    write(dir + "cache/index1/level", "1");
    write(dir + "cache/index1/shared_cpu_list", siblings);
    write(dir + "cache/index3/type", "Unified");
    write(dir + "cache/index3/level", "3");
    write(dir + "cache/index3/shared_cpu_list", l3);
  }
};

// 2 sockets x 2 NUMA nodes (NPS2) x 8 cores x 2 threads = 64 CPUs; CPU c and c+32 are one core.
// Node n: cores 8n..8n+7; each node has two core complexes (L3) of 4 cores. GPUs 2n, 2n+1 on
// node n, plus an NVIDIA audio function (class 0x0403) that is no GPU.
FakeSysfs two_socket_server() {
  FakeSysfs f;
  for (int n = 0; n < 4; ++n) {
    f.write(fmt::format("sys/devices/system/node/node{}/cpulist", n),
            fmt::format("{}-{},{}-{}", 8 * n, 8 * n + 7, 8 * n + 32, 8 * n + 39));
    for (int k = 0; k < 8; ++k) {
      int c = 8 * n + k;
      int ccx = 8 * n + (k / 4) * 4;
      std::string l3 = fmt::format("{}-{},{}-{}", ccx, ccx + 3, ccx + 32, ccx + 35);
      std::string sib = fmt::format("{},{}", c, c + 32);
      f.cpu(c, n / 2, sib, l3);
      f.cpu(c + 32, n / 2, sib, l3);
    }
  }
  f.write("sys/devices/system/node/possible", "0-3");
  const char* buses[] = {"18", "2a", "3a", "5d", "9a", "ab", "ba", "db"};
  for (int g = 0; g < 8; ++g) f.gpu(fmt::format("0000:{}:00.0", buses[g]), g / 2);
  f.gpu("0000:18:00.1", 0, "0x040300");
  return f;
}

std::vector<int> all_cpus(int n) {
  std::vector<int> v;
  for (int c = 0; c < n; ++c) v.push_back(c);
  return v;
}

std::string cpus_of(const NumaBinding& b) {
  return format_cpu_list(b.cpus);
}

TEST(Numa, ReadsGpusInBusOrderWithTheirNodes) {
  FakeSysfs f = two_socket_server();
  NumaMachine m = read_numa_machine(f.root.string());
  ASSERT_EQ(m.gpus.size(), 8u);  // the audio function is not a GPU
  EXPECT_EQ(m.gpus[0].pci, "0000:18:00.0");
  EXPECT_EQ(m.gpus[7].numa_node, 3);
  EXPECT_EQ(m.node_cpus.size(), 4u);
  EXPECT_EQ(m.cpu_package.at(40), 0);
  EXPECT_EQ(m.cpu_core.at(40), 8);
  EXPECT_EQ(m.cpu_llc.at(45), 12);
}

TEST(Numa, NodeModeBindsToTheGpusNode) {
  FakeSysfs f = two_socket_server();
  NumaMachine m = read_numa_machine(f.root.string());
  auto b = plan_numa_binding(m, NumaMode::kNode, {0, 5}, all_cpus(8) /*ignored*/, all_cpus(64));
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(cpus_of(b[0]), "0-7,32-39");
  EXPECT_EQ(b[0].mem_nodes, std::vector<int>{0});
  EXPECT_EQ(cpus_of(b[1]), "16-23,48-55");
  EXPECT_EQ(b[1].mem_nodes, std::vector<int>{2});
  // Only the CPUs mlrun itself may use (a cgroup or taskset narrowed it).
  auto narrowed = plan_numa_binding(m, NumaMode::kNode, {0}, {0}, {2, 3, 4, 40});
  EXPECT_EQ(cpus_of(narrowed[0]), "2-4");
}

TEST(Numa, SocketModeSpansTheSocketsNodes) {
  FakeSysfs f = two_socket_server();
  NumaMachine m = read_numa_machine(f.root.string());
  auto b = plan_numa_binding(m, NumaMode::kSocket, {1, 6}, {}, all_cpus(64));
  EXPECT_EQ(cpus_of(b[0]), "0-15,32-47");
  EXPECT_EQ(b[0].mem_nodes, (std::vector<int>{0, 1}));
  EXPECT_EQ(cpus_of(b[1]), "16-31,48-63");
  EXPECT_EQ(b[1].mem_nodes, (std::vector<int>{2, 3}));
}

TEST(Numa, ExclusiveSplitsTheNodesCoresBetweenItsGpus) {
  FakeSysfs f = two_socket_server();
  NumaMachine m = read_numa_machine(f.root.string());
  std::vector<int> eight = {0, 1, 2, 3, 4, 5, 6, 7};
  auto b = plan_numa_binding(m, NumaMode::kExclusive, eight, eight, all_cpus(64));
  ASSERT_EQ(b.size(), 8u);
  // Whole cores (both threads), no overlap: GPU 0 the node's first 4 cores, GPU 1 the rest.
  EXPECT_EQ(cpus_of(b[0]), "0-3,32-35");
  EXPECT_EQ(cpus_of(b[1]), "4-7,36-39");
  EXPECT_EQ(cpus_of(b[7]), "28-31,60-63");
  // Three GPUs on a node of 8 cores: 3, 3, 2 (the lowest get the extra core, as torch).
  FakeSysfs g = two_socket_server();
  g.gpu("0000:1a:00.0", 0);  // a third GPU on node 0, bus order puts it at index 1
  NumaMachine m3 = read_numa_machine(g.root.string());
  auto c = plan_numa_binding(m3, NumaMode::kExclusive, {0, 1, 2}, {0, 1, 2}, all_cpus(64));
  EXPECT_EQ(cpus_of(c[0]), "0-2,32-34");
  EXPECT_EQ(cpus_of(c[1]), "3-5,35-37");
  EXPECT_EQ(cpus_of(c[2]), "6-7,38-39");
}

TEST(Numa, CoreComplexGivesEachGpuItsOwnLastLevelCache) {
  FakeSysfs f = two_socket_server();
  NumaMachine m = read_numa_machine(f.root.string());
  std::vector<int> eight = {0, 1, 2, 3, 4, 5, 6, 7};
  auto b = plan_numa_binding(m, NumaMode::kCoreComplex, {2, 3}, eight, all_cpus(64));
  EXPECT_EQ(cpus_of(b[0]), "8-11,40-43");
  EXPECT_EQ(cpus_of(b[1]), "12-15,44-47");
}

// One socket, one NUMA node whose GPUs report numa_node -1 (as single-node kernels do), no SMT.
TEST(Numa, OneSocketMachine) {
  FakeSysfs f;
  f.write("sys/devices/system/node/node0/cpulist", "0-7");
  for (int c = 0; c < 8; ++c) f.cpu(c, 0, std::to_string(c), "0-7");
  f.gpu("0000:01:00.0", -1);
  f.gpu("0000:02:00.0", -1);
  NumaMachine m = read_numa_machine(f.root.string());
  EXPECT_EQ(m.gpus[1].numa_node, 0);
  auto node = plan_numa_binding(m, NumaMode::kNode, {0, 1}, {0, 1}, all_cpus(8));
  EXPECT_EQ(cpus_of(node[1]), "0-7");
  EXPECT_EQ(node[1].mem_nodes, std::vector<int>{0});
  auto socket = plan_numa_binding(m, NumaMode::kSocket, {1}, {0, 1}, all_cpus(8));
  EXPECT_EQ(cpus_of(socket[0]), "0-7");
  auto excl = plan_numa_binding(m, NumaMode::kExclusive, {0, 1}, {0, 1}, all_cpus(8));
  EXPECT_EQ(cpus_of(excl[0]), "0-3");
  EXPECT_EQ(cpus_of(excl[1]), "4-7");
  // One L3 for the socket: both GPUs share the one core complex.
  auto ccx = plan_numa_binding(m, NumaMode::kCoreComplex, {0, 1}, {0, 1}, all_cpus(8));
  EXPECT_EQ(cpus_of(ccx[1]), "0-7");
}

TEST(Numa, ClearErrors) {
  FakeSysfs f;
  f.write("sys/devices/system/node/node0/cpulist", "0-1");
  NumaMachine no_gpu = read_numa_machine(f.root.string());
  try {
    plan_numa_binding(no_gpu, NumaMode::kNode, {0}, {0}, {0, 1});
    FAIL() << "no error without a GPU";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no NVIDIA GPU"), std::string::npos);
  }
  f.gpu("0000:01:00.0", 0);
  NumaMachine one = read_numa_machine(f.root.string());
  EXPECT_THROW(plan_numa_binding(one, NumaMode::kNode, {3}, {3}, {0, 1}), std::runtime_error);
  FakeSysfs bare;
  bare.gpu("0000:01:00.0", 0);
  try {
    plan_numa_binding(read_numa_machine(bare.root.string()), NumaMode::kNode, {0}, {0}, {0});
    FAIL() << "no error without NUMA nodes";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no NUMA node"), std::string::npos);
  }
}

TEST(Numa, CpuLists) {
  EXPECT_EQ(parse_cpu_list("0-3,8,10-11\n"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_EQ(format_cpu_list({0, 1, 2, 3, 8, 10, 11}), "0-3,8,10-11");
  EXPECT_FALSE(parse_cpu_list("3-1"));
  EXPECT_FALSE(parse_cpu_list("a"));
  EXPECT_EQ(parse_numa_mode("core-complex"), NumaMode::kCoreComplex);
  EXPECT_FALSE(parse_numa_mode("nodes"));
}

}  // namespace
}  // namespace mlrun
