#include "worker/hardware.h"

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include <fmt/format.h>

#include "rendezvous/integer.h"
#include "rendezvous/nccl_library.h"

namespace mlrun {

int count_gpu_device_files() {
  int devices = 0;
  if (DIR* dir = opendir("/dev")) {
    while (dirent* e = readdir(dir)) {
      const char* name = e->d_name;
      if (std::strncmp(name, "nvidia", 6) != 0 || name[6] == '\0') continue;
      bool digits = true;
      for (const char* p = name + 6; *p; ++p) digits = digits && *p >= '0' && *p <= '9';
      devices += digits;
    }
    closedir(dir);
  }
  return devices;
}

int count_gpus() {
  int devices = count_gpu_device_files();
  // CUDA_VISIBLE_DEVICES narrows what is there; it cannot add GPUs a machine lacks.
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) {
    std::string v = visible;
    if (v.empty() || v == "-1" || v == "NoDevFiles") return 0;
    int listed = 1;
    for (char c : v) listed += c == ',';
    return std::min(listed, devices);
  }
  return devices;
}

int count_cpus() {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? static_cast<int>(n) : 1;
}

bool nccl_available() {
  return NcclLibrary().loaded();  // Unloaded again: the launcher itself never uses NCCL.
}

int resolve_nproc_per_node(const std::string& spec) {
  if (spec == "cpu") return count_cpus();
  if (spec == "gpu") {
    int gpus = count_gpus();
    if (gpus == 0) {
      throw std::runtime_error("--nproc_per_node=gpu: no NVIDIA GPU found on this node");
    }
    return gpus;
  }
  if (spec == "auto") {
    int gpus = count_gpus();
    return gpus > 0 ? gpus : count_cpus();
  }
  int n = 0;
  if (!parse_integer(std::string_view(spec), n, 1)) {
    throw std::runtime_error(
        fmt::format("--nproc_per_node={}: not a positive integer or one of auto, gpu, cpu", spec));
  }
  return n;
}

}  // namespace mlrun
