// This host's probes (`mlrun doctor` without -H, and the remote side of it): GPUs, NCCL, Gloo,
// Open MPI and PyTorch, each bounded, and what the launcher would choose here.
#include <dlfcn.h>
#include <link.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "doctor/bandwidth.h"
#include "doctor/doctor.h"
#include "doctor/impl.h"
#include "rendezvous/nccl_library.h"
#include "worker/cgroup.h"
#include "worker/env.h"
#include "worker/hardware.h"
#include "worker/net.h"
#include "worker/network.h"
#include "worker/numa.h"
#include "worker/process.h"
#include "worker/text_file.h"

namespace mlrun::doctor {

std::atomic<pid_t> g_probe_child{0};

namespace {

namespace fs = std::filesystem;

std::string read_file(const std::string& path) {
  return read_text_file(path).value_or("");
}

std::string trim(std::string_view s) {
  auto b = s.find_first_not_of(" \t\r\n");
  if (b == std::string_view::npos) return "";
  auto e = s.find_last_not_of(" \t\r\n");
  return std::string(s.substr(b, e - b + 1));
}

std::string first_line(std::string_view s) {
  return trim(s.substr(0, s.find('\n')));
}

}  // namespace

std::string last_line(std::string_view s) {
  std::string t = trim(s);
  auto nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

namespace {

std::string path_env() {
  const char* path = std::getenv("PATH");
  return path ? path : "/usr/local/bin:/usr/bin:/bin";
}

// The file a dlopen handle was loaded from.
std::string loaded_path(void* handle) {
  link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr) {
    std::error_code ec;
    fs::path real = fs::canonical(map->l_name, ec);
    return ec ? std::string(map->l_name) : real.string();
  }
  return "";
}

GpuReport probe_gpus() {
  GpuReport g;
  g.device_files = count_gpu_device_files();
  std::error_code ec;
  std::vector<std::string> infos;
  for (const auto& entry : fs::directory_iterator("/proc/driver/nvidia/gpus", ec)) {
    infos.push_back((entry.path() / "information").string());
  }
  std::sort(infos.begin(), infos.end());  // By PCI bus id, the order nvidia-smi uses.
  for (const auto& path : infos) {
    std::string model = parse_gpu_model(read_file(path));
    g.models.push_back(model.empty() ? "unknown model" : model);
  }
  if (const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES")) g.cuda_visible_devices = cvd;
  g.visible = count_gpus();
  return g;
}

Component probe_nccl() {
  Component c;
  c.how = "dlopen libnccl.so.2 + ncclGetVersion";
  NcclLibrary nccl;
  if (!nccl.loaded()) {
    c.note = nccl.error();
    return c;
  }
  c.found = true;
  c.path = loaded_path(nccl.handle());
  if (int code = nccl.version(&c.note); code != 0) c.version = decode_nccl_version(code);
  return c;
}

Component probe_gloo() {
  Component c;
  // Gloo has no version call; Debian ships it as libgloo0 with the upstream snapshot in the
  // package version, so that is the version reported where dpkg knows the package.
  c.how = "dlopen libgloo.so.0";
  void* h = nullptr;
  for (const char* name : {"libgloo.so.0", "libgloo.so"}) {
    h = dlopen(name, RTLD_LAZY | RTLD_LOCAL);
    if (h != nullptr) {
      c.how = fmt::format("dlopen {}", name);
      break;
    }
  }
  if (h == nullptr) {
    const char* why = dlerror();
    c.note = fmt::format(
        "{} (PyTorch carries its own Gloo inside libtorch; this checks the "
        "system library that C++ programs link)",
        why ? why : "libgloo.so.0 cannot be loaded");
    return c;
  }
  c.found = true;
  c.path = loaded_path(h);
  dlclose(h);
  std::string version = dpkg_installed_version(read_file("/var/lib/dpkg/status"), "libgloo0");
  if (!version.empty()) {
    c.version = version;
    c.how += "; version of Debian's libgloo0 from /var/lib/dpkg/status";
  } else {
    c.note = "Gloo has no version call and no package database names it";
  }
  return c;
}

Component probe_mpi() {
  Component c;
  c.how = "mpirun --version";
  std::string mpirun;
  try {
    mpirun = resolve_program("mpirun", path_env());
  } catch (const SpawnError& e) {
    c.note = fmt::format(
        "no mpirun in PATH ({}); install openmpi-bin, or put its bin in PATH "
        "and its lib in LD_LIBRARY_PATH",
        path_env());
    return c;
  }
  std::error_code ec;
  fs::path real = fs::canonical(mpirun, ec);
  c.path = ec || real == mpirun ? mpirun : fmt::format("{} -> {}", mpirun, real.string());
  BoundedRun r = run_bounded({mpirun, "--version"}, kMpirunTimeoutSeconds, &g_probe_child);
  if (!r.error.empty()) {
    c.note = r.error;
  } else if (r.timed_out) {
    c.note = fmt::format("mpirun --version did not finish in {} s", kMpirunTimeoutSeconds);
  } else if (!WIFEXITED(r.status) || WEXITSTATUS(r.status) != 0) {
    c.note = fmt::format("mpirun --version failed: {}", last_line(r.err + r.out));
  } else {
    c.found = true;
    c.version = first_line(r.out);
    if (c.version.find("Open MPI") == std::string::npos) {
      c.note = "this mpirun is not Open MPI's; --backend mpi builds Open MPI's command line";
    }
  }
  return c;
}

Component probe_torch(double timeout) {
  Component c;
  const char* python_env = std::getenv("PYTHON");
  std::string python = python_env && *python_env ? python_env : "python3";
  c.how = fmt::format("{} -c 'import torch' (bounded by {} s)", python, timeout);
  if (timeout <= 0) {
    c.checked = false;
    c.note = "not checked (--python-timeout 0)";
    return c;
  }
  std::string resolved;
  try {
    resolved = resolve_program(python, path_env());
  } catch (const SpawnError& e) {
    c.note = e.what();
    return c;
  }
  c.path = resolved;
  BoundedRun r =
      run_bounded({resolved, "-c", "import sys, torch; sys.stdout.write(torch.__version__)"},
                  timeout, &g_probe_child);
  if (!r.error.empty()) {
    c.note = r.error;
  } else if (r.timed_out) {
    c.checked = false;
    c.note = fmt::format("not checked: importing torch took more than {} s", timeout);
  } else if (WIFEXITED(r.status) && WEXITSTATUS(r.status) == 0) {
    c.found = true;
    c.version = trim(r.out);
  } else {
    c.note = last_line(r.err);
    if (c.note.empty()) c.note = "the import failed";
  }
  return c;
}

}  // namespace

std::string parse_gpu_model(std::string_view information) {
  std::size_t pos = 0;
  while (pos < information.size()) {
    auto nl = information.find('\n', pos);
    std::string_view line =
        information.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    if (line.rfind("Model:", 0) == 0) return trim(line.substr(6));
    if (nl == std::string_view::npos) break;
    pos = nl + 1;
  }
  return "";
}

std::string dpkg_installed_version(std::string_view status, std::string_view package) {
  // Stanzas are separated by blank lines; fields are "Name: value".
  std::size_t pos = 0;
  while (pos < status.size()) {
    auto end = status.find("\n\n", pos);
    std::string_view stanza =
        status.substr(pos, end == std::string_view::npos ? std::string_view::npos : end - pos);
    std::string name, state, version;
    std::size_t lp = 0;
    while (lp < stanza.size()) {
      auto nl = stanza.find('\n', lp);
      std::string_view line =
          stanza.substr(lp, nl == std::string_view::npos ? std::string_view::npos : nl - lp);
      auto field = [&](std::string_view key) -> std::optional<std::string> {
        if (line.size() > key.size() && line.substr(0, key.size()) == key) {
          return trim(line.substr(key.size()));
        }
        return std::nullopt;
      };
      if (auto v = field("Package:")) name = *v;
      if (auto v = field("Status:")) state = *v;
      if (auto v = field("Version:")) version = *v;
      if (nl == std::string_view::npos) break;
      lp = nl + 1;
    }
    if (name == package && state.ends_with(" installed")) return version;
    if (end == std::string_view::npos) break;
    pos = end + 2;
  }
  return "";
}

std::string interface_kind(const NetInterface& i) {
  if (i.infiniband) return "InfiniBand";
  if (i.loopback) return "loopback";
  if (i.is_virtual) return "virtual";
  return "ethernet";
}

std::vector<DoctorVariable> doctor_variables(
    const std::string& backend, const std::vector<std::pair<std::string, std::string>>& defaults,
    const std::vector<std::string>& env_entries) {
  Environment env(env_entries);
  auto user_value = [&env](const std::string& name) -> std::optional<std::string> {
    const std::string* e = env.get(name);
    if (e == nullptr) return std::nullopt;
    return e->substr(name.size() + 1);
  };
  std::vector<DoctorVariable> vars;
  vars.push_back({"MLRUN_BACKEND", backend, std::nullopt, false});
  for (const auto& [name, value] : defaults) vars.push_back({name, value, user_value(name), true});
  return vars;
}

HostReport probe_local_host(const DoctorOptions& o) {
  HostReport h;
  h.host = host_name();
  h.local = true;
  h.gpus = probe_gpus();
  h.nccl = probe_nccl();
  h.gloo = probe_gloo();
  h.mpi = probe_mpi();
  h.torch = probe_torch(o.python_timeout);
  h.interfaces = list_interfaces();
  h.infiniband = has_infiniband_device();
  h.numa = describe_numa(read_numa_machine("/"));
  h.teardown = probe_cgroup_support().describe();
  h.master_addr = o.master_addr;
  if (o.iface == "auto") {
    h.iface = choose_interface(h.interfaces, o.master_addr);
  } else if (std::none_of(h.interfaces.begin(), h.interfaces.end(),
                          [&](const NetInterface& i) { return i.name == o.iface && i.up; })) {
    h.errors.push_back(fmt::format("--iface={}: no such interface is up on {}", o.iface, h.host));
  } else {
    h.iface = {o.iface, fmt::format("{}: chosen with --iface", o.iface), {}};
  }
  h.backend = choose_backend(o.backend, h.gpus.visible, h.nccl.found, h.nccl.version);
  h.variables = doctor_variables(h.backend.name,
                                 network_variables(h.iface.name, h.infiniband, h.iface.subnet),
                                 Environment::current().entries());
  return h;
}

}  // namespace mlrun::doctor
