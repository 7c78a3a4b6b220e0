#include "launcher/doctor.h"

#include <dirent.h>
#include <dlfcn.h>
#include <link.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "worker/env.h"
#include "worker/hardware.h"
#include "worker/net.h"
#include "worker/process.h"

namespace mlrun {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr double kMpirunTimeoutSeconds = 10;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
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

std::string last_line(std::string_view s) {
  std::string t = trim(s);
  auto nl = t.rfind('\n');
  return nl == std::string::npos ? t : t.substr(nl + 1);
}

std::string speed_text(int mbps) {
  if (mbps < 0) return "speed unknown";
  if (mbps >= 1000 && mbps % 1000 == 0) return fmt::format("{} Gb/s", mbps / 1000);
  if (mbps >= 1000) return fmt::format("{:.1f} Gb/s", mbps / 1000.0);
  return fmt::format("{} Mb/s", mbps);
}

// A short command run to completion or to a deadline, its output captured.
struct BoundedRun {
  std::string error;  // Non-empty: it could not start.
  bool timed_out = false;
  int status = 0;  // waitpid's.
  std::string out, err;
};

BoundedRun run_bounded(const std::vector<std::string>& argv, double timeout_seconds) {
  BoundedRun r;
  auto spawner = make_posix_spawner();
  SpawnedProcess p;
  try {
    p = spawner->spawn(SpawnRequest{argv, Environment::current().entries(), {}});
  } catch (const SpawnError& e) {
    r.error = e.what();
    return r;
  }
  auto deadline =
      Clock::now() + std::chrono::milliseconds(static_cast<long>(timeout_seconds * 1000));
  pollfd fds[2] = {{p.stdout_fd, POLLIN, 0}, {p.stderr_fd, POLLIN, 0}};
  std::string* sinks[2] = {&r.out, &r.err};
  int open_fds = 2;
  while (open_fds > 0) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) {
      r.timed_out = true;
      break;
    }
    int n = poll(fds, 2, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;  // Not expected; the exit is still awaited under the deadline below.
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buf[4096];
      ssize_t got = read(fds[i].fd, buf, sizeof buf);
      if (got > 0) {
        // A probe prints a line or two; a runaway one is cut, not buffered without bound.
        if (sinks[i]->size() < 64 * 1024) sinks[i]->append(buf, static_cast<std::size_t>(got));
      } else if (got == 0 || (errno != EAGAIN && errno != EINTR)) {
        close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  for (auto& f : fds) {
    if (f.fd >= 0) close(f.fd);
  }
  // The exit is awaited under the same deadline: a probe that closed its output may still hang.
  while (!r.timed_out) {
    pid_t done = waitpid(p.pid, &r.status, WNOHANG);
    if (done == p.pid || (done < 0 && errno != EINTR)) break;
    if (Clock::now() >= deadline) {
      r.timed_out = true;
      break;
    }
    usleep(5000);
  }
  if (r.timed_out) {
    spawner->signal_group(p.pid, SIGKILL);
    while (waitpid(p.pid, &r.status, 0) < 0 && errno == EINTR) {
    }
  }
  // Whatever the probe left behind in its group goes too.
  spawner->signal_group(p.pid, SIGKILL);
  return r;
}

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
  if (DIR* dir = opendir("/dev")) {
    while (dirent* e = readdir(dir)) {
      const char* name = e->d_name;
      if (std::strncmp(name, "nvidia", 6) != 0 || name[6] == '\0') continue;
      bool digits = true;
      for (const char* p = name + 6; *p; ++p) digits = digits && *p >= '0' && *p <= '9';
      g.device_files += digits;
    }
    closedir(dir);
  }
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
  void* h = dlopen("libnccl.so.2", RTLD_LAZY | RTLD_LOCAL);
  if (h == nullptr) {
    const char* why = dlerror();
    c.note = why ? why : "libnccl.so.2 cannot be loaded";
    return c;
  }
  c.found = true;
  c.path = loaded_path(h);
  using GetVersion = int (*)(int*);
  auto get_version = reinterpret_cast<GetVersion>(dlsym(h, "ncclGetVersion"));
  int code = 0;
  if (get_version == nullptr) {
    c.note = "the library has no ncclGetVersion";
  } else if (int rc = get_version(&code); rc != 0) {
    c.note = fmt::format("ncclGetVersion failed with code {}", rc);
  } else {
    c.version = decode_nccl_version(code);
  }
  dlclose(h);
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
  BoundedRun r = run_bounded({mpirun, "--version"}, kMpirunTimeoutSeconds);
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
  BoundedRun r = run_bounded(
      {resolved, "-c", "import sys, torch; sys.stdout.write(torch.__version__)"}, timeout);
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

// A JSON string, or null for an empty one.
nlohmann::json or_null(const std::string& s) {
  return s.empty() ? nlohmann::json() : nlohmann::json(s);
}

nlohmann::json component_json(const Component& c) {
  nlohmann::json j = {{"found", c.found}, {"checked", c.checked}, {"how", c.how}};
  j["version"] = or_null(c.version);
  j["path"] = or_null(c.path);
  j["note"] = or_null(c.note);
  return j;
}

std::string component_text(const Component& c) {
  std::string s;
  if (!c.checked) {
    s = c.note;
  } else if (c.found) {
    s = c.version.empty() ? "found" : c.version;
    if (!c.path.empty()) s += fmt::format(" ({})", c.path);
  } else {
    s = "not found";
  }
  if (c.checked && !c.note.empty()) s += fmt::format("; {}", c.note);
  s += fmt::format("  [{}]", c.how);
  return s;
}

std::string gpu_text(const GpuReport& g) {
  std::string s =
      fmt::format("{} NVIDIA GPU{} (/dev/nvidiaN)", g.device_files, g.device_files == 1 ? "" : "s");
  if (g.cuda_visible_devices) {
    s += fmt::format(", {} visible to workers (CUDA_VISIBLE_DEVICES={})", g.visible,
                     *g.cuda_visible_devices);
    if (g.visible > g.device_files) {
      s += "; CUDA_VISIBLE_DEVICES names more GPUs than this host has device files for";
    }
  }
  for (std::size_t i = 0; i < g.models.size(); ++i) {
    s += fmt::format("\n    {}: {}", i, g.models[i]);
  }
  return s;
}

}  // namespace

DoctorArgs parse_doctor_args(const std::vector<std::string>& args) {
  DoctorArgs r;
  auto& o = r.options;
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string arg = args[i];
    std::string value;
    bool has_value = false;
    if (arg.rfind("--", 0) == 0) {
      auto eq = arg.find('=');
      if (eq != std::string::npos) {
        value = arg.substr(eq + 1);
        arg = arg.substr(0, eq);
        has_value = true;
      }
      std::replace(arg.begin() + 2, arg.end(), '-', '_');
    }
    auto take = [&](const char* flag) -> bool {
      if (has_value) return true;
      if (i + 1 < args.size()) {
        value = args[++i];
        return true;
      }
      r.errors.push_back(fmt::format("doctor: {} needs a value", flag));
      return false;
    };
    if (arg == "--json") {
      o.json = true;
    } else if (arg == "-h" || arg == "--help") {
      o.help = true;
    } else if (arg == "--hostfile") {
      if (take("--hostfile")) o.hostfile = value;
    } else if (arg == "-H" || arg == "--hosts") {
      if (take("-H")) o.hosts = value;
    } else if (arg == "--master_addr") {
      if (take("--master_addr")) o.master_addr = value;
    } else if (arg == "--iface") {
      if (take("--iface")) o.iface = value;
    } else if (arg == "--backend") {
      if (!take("--backend")) continue;
      if (value != "auto" && value != "nccl" && value != "gloo" && value != "mpi") {
        r.errors.push_back(
            fmt::format("doctor: --backend={}: expected auto, nccl, gloo or mpi", value));
      } else {
        o.backend = value;
      }
    } else if (arg == "--python_timeout") {
      if (!take("--python-timeout")) continue;
      char* end = nullptr;
      double v = std::strtod(value.c_str(), &end);
      if (value.empty() || *end != '\0' || v < 0 || v > 600) {
        r.errors.push_back(
            fmt::format("doctor: --python-timeout={}: expected seconds between 0 and 600", value));
      } else {
        o.python_timeout = v;
      }
    } else {
      r.errors.push_back(fmt::format("doctor: unknown argument '{}'", args[i]));
    }
  }
  if (!o.hostfile.empty() && !o.hosts.empty()) {
    r.errors.push_back("doctor: give --hostfile or -H, not both");
  }
  return r;
}

std::string doctor_usage() {
  return "usage: mlrun doctor [--json] [--hostfile FILE | -H HOST[:SLOTS],...]\n"
         "                    [--backend auto|nccl|gloo|mpi] [--iface NAME|auto]\n"
         "                    [--master_addr ADDR] [--python-timeout SECONDS]\n"
         "\n"
         "Reports this host's GPUs, NCCL, Gloo, Open MPI and PyTorch, its network interfaces,\n"
         "and the backend, interface and variables mlrun would use here, with the reasons.\n"
         "--backend, --iface and --master_addr mean what they mean to `mlrun`.\n"
         "Remote checks of --hostfile / -H hosts (SSH, rendezvous port) are not implemented "
         "yet.\n";
}

BackendChoice choose_backend(const std::string& requested, int gpus, const Component& nccl) {
  if (requested != "auto") return {requested, fmt::format("--backend {} was given", requested)};
  if (gpus > 0 && nccl.found) {
    return {"nccl", fmt::format("{} NVIDIA GPU{} and NCCL{} found", gpus, gpus == 1 ? "" : "s",
                                nccl.version.empty() ? "" : " " + nccl.version)};
  }
  if (gpus > 0) return {"gloo", fmt::format("{} NVIDIA GPU(s) but no NCCL (libnccl.so.2)", gpus)};
  if (nccl.found) return {"gloo", "no NVIDIA GPU (NCCL is installed but needs one)"};
  return {"gloo", "no NVIDIA GPU and no NCCL"};
}

std::string decode_nccl_version(int code) {
  if (code <= 0) return "";
  // NCCL_VERSION(X,Y,Z): X*1000+Y*100+Z before 2.9, X*10000+Y*100+Z since.
  if (code >= 10000) return fmt::format("{}.{}.{}", code / 10000, code % 10000 / 100, code % 100);
  return fmt::format("{}.{}.{}", code / 1000, code % 1000 / 100, code % 100);
}

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
  h.master_addr = o.master_addr;
  if (o.iface == "auto") {
    h.iface = choose_interface(h.interfaces, o.master_addr);
  } else if (std::none_of(h.interfaces.begin(), h.interfaces.end(),
                          [&](const NetInterface& i) { return i.name == o.iface && i.up; })) {
    h.errors.push_back(fmt::format("--iface={}: no such interface is up on {}", o.iface, h.host));
  } else {
    h.iface = {o.iface, fmt::format("{}: chosen with --iface", o.iface), {}};
  }
  h.backend = choose_backend(o.backend, h.gpus.visible, h.nccl);
  h.variables = doctor_variables(h.backend.name, network_variables(h.iface.name, h.infiniband),
                                 Environment::current().entries());
  return h;
}

std::string format_doctor_text(const DoctorReport& report) {
  std::string s;
  for (const auto& h : report.hosts) {
    s += fmt::format("host {}{}\n", h.host, h.local ? " (this host)" : "");
    s += fmt::format("  GPUs        {}\n", gpu_text(h.gpus));
    s += fmt::format("  NCCL        {}\n", component_text(h.nccl));
    s += fmt::format("  Gloo        {}\n", component_text(h.gloo));
    s += fmt::format("  Open MPI    {}\n", component_text(h.mpi));
    s += fmt::format("  PyTorch     {}\n", component_text(h.torch));
    s += fmt::format("  InfiniBand  {}\n", h.infiniband ? "a device exists (/sys/class/infiniband)"
                                                        : "none (/sys/class/infiniband)");
    s += "  Interfaces\n";
    std::size_t width = 4;
    for (const auto& i : h.interfaces) width = std::max(width, i.name.size());
    for (const auto& i : h.interfaces) {
      std::vector<std::string> addrs;
      for (const auto& a : i.addresses) addrs.push_back(a.text);
      s += fmt::format("    {:<{}}  {:<10}  {:<4}  {:<13}  {}\n", i.name, width, interface_kind(i),
                       i.up ? "up" : "down", speed_text(i.speed_mbps),
                       addrs.empty() ? "no address" : fmt::format("{}", fmt::join(addrs, " ")));
    }
    s += fmt::format("  Backend     {}: {}\n", h.backend.name, h.backend.reason);
    for (const auto& e : h.errors) s += fmt::format("  Error       {}\n", e);
    if (h.errors.empty()) {
      s += fmt::format("  Interface   {}{}\n", h.iface.reason,
                       h.master_addr.empty() ? " (no --master_addr given)" : "");
    }
    if (!h.iface.warning.empty()) s += fmt::format("  Warning     {}\n", h.iface.warning);
    s += "  Variables   what every worker gets (a value already in your environment wins):\n";
    for (const auto& v : h.variables) {
      if (v.user_value && v.is_default) {
        s += fmt::format("    {}={}  (yours; mlrun's default would be {})\n", v.name, *v.user_value,
                         v.value);
      } else {
        s += fmt::format("    {}={}\n", v.name, v.value);
      }
    }
  }
  if (!report.remote_hosts.empty()) {
    s += fmt::format("remote checks ({}): {}\n", report.remote_hosts, report.remote_status);
  } else {
    s += fmt::format("remote checks: {}\n", report.remote_status);
  }
  return s;
}

nlohmann::json doctor_json(const DoctorReport& report) {
  nlohmann::json hosts = nlohmann::json::array();
  for (const auto& h : report.hosts) {
    nlohmann::json interfaces = nlohmann::json::array();
    for (const auto& i : h.interfaces) {
      nlohmann::json addrs = nlohmann::json::array();
      for (const auto& a : i.addresses) addrs.push_back(a.text);
      interfaces.push_back(
          {{"name", i.name},
           {"kind", interface_kind(i)},
           {"up", i.up},
           {"speed_mbps", i.speed_mbps < 0 ? nlohmann::json() : nlohmann::json(i.speed_mbps)},
           {"addresses", addrs}});
    }
    nlohmann::json vars = nlohmann::json::array();
    for (const auto& v : h.variables) {
      vars.push_back(
          {{"name", v.name},
           {"value", v.value},
           {"default", v.is_default},
           {"user_value", v.user_value ? nlohmann::json(*v.user_value) : nlohmann::json()},
           {"effective", (v.user_value && v.is_default ? *v.user_value : v.value)}});
    }
    nlohmann::json gpus = {{"device_files", h.gpus.device_files},
                           {"visible", h.gpus.visible},
                           {"models", h.gpus.models}};
    gpus["cuda_visible_devices"] = h.gpus.cuda_visible_devices
                                       ? nlohmann::json(*h.gpus.cuda_visible_devices)
                                       : nlohmann::json();
    nlohmann::json iface = {{"name", or_null(h.iface.name)},
                            {"reason", h.iface.reason},
                            {"warning", or_null(h.iface.warning)}};
    hosts.push_back({{"host", h.host},
                     {"local", h.local},
                     {"gpus", gpus},
                     {"nccl", component_json(h.nccl)},
                     {"gloo", component_json(h.gloo)},
                     {"openmpi", component_json(h.mpi)},
                     {"torch", component_json(h.torch)},
                     {"infiniband", h.infiniband},
                     {"interfaces", interfaces},
                     {"master_addr", or_null(h.master_addr)},
                     {"interface", iface},
                     {"backend", {{"name", h.backend.name}, {"reason", h.backend.reason}}},
                     {"variables", vars},
                     {"errors", h.errors}});
  }
  return {{"hosts", hosts},
          {"remote", {{"hosts", or_null(report.remote_hosts)}, {"status", report.remote_status}}}};
}

int doctor_command(const std::vector<std::string>& args) {
  // 1. Flags: every user error reported together.
  DoctorArgs parsed = parse_doctor_args(args);
  if (parsed.options.help) {
    fmt::print("{}", doctor_usage());
    return 0;
  }
  for (const auto& e : parsed.errors) fmt::print(stderr, "mlrun: error: {}\n", e);
  if (!parsed.errors.empty()) return 2;
  const DoctorOptions& o = parsed.options;
  // 2. This host: hardware, libraries, interfaces, and what the launcher would choose.
  DoctorReport report;
  report.hosts.push_back(probe_local_host(o));
  // 3. Other hosts: their own sections, SSH and rendezvous-port reachability belong here once
  //    the multi-node launch exists; until then the report says so and checks nothing.
  if (!o.hostfile.empty()) {
    report.remote_hosts = fmt::format("--hostfile {}", o.hostfile);
  } else if (!o.hosts.empty()) {
    report.remote_hosts = fmt::format("-H {}", o.hosts);
  }
  report.remote_status =
      "not implemented yet (SSH and rendezvous-port reachability of every host come with the "
      "multi-node launch)";
  if (!report.remote_hosts.empty()) report.remote_status += "; these hosts were not contacted";
  // 4. Print.
  if (o.json) {
    fmt::print("{}\n", doctor_json(report).dump(2));
  } else {
    fmt::print("{}", format_doctor_text(report));
  }
  return report.hosts.front().errors.empty() ? 0 : 2;
}

}  // namespace mlrun
