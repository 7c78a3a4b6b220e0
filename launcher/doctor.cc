#include "launcher/doctor.h"
#include "launcher/plan.h"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>
#include <variant>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <mlrun/rendezvous.hpp>

#include "launcher/head.h"
#include "launcher/ssh.h"
#include "worker/env.h"
#include "worker/hardware.h"
#include "worker/net.h"
#include "worker/process.h"

namespace mlrun {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr double kMpirunTimeoutSeconds = 10;

// The probe run_bounded is waiting for (0: none), for the stdin lifeline to kill on its way out.
std::atomic<pid_t> g_probe_child{0};

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
  g_probe_child = p.pid;
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
  g_probe_child = 0;
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

bool parse_int_in(const std::string& s, int lo, int hi, int& out) {
  char* end = nullptr;
  errno = 0;
  long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || errno != 0 || v < lo || v > hi) return false;
  out = static_cast<int>(v);
  return true;
}

}  // namespace

DoctorArgs parse_doctor_args(const std::vector<std::string>& args) {
  DoctorArgs r;
  auto& o = r.options;
  bool sweep_flags_given = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    FlagToken token = split_flag(args[i]);
    std::string arg = token.name;
    std::string value = token.value;
    bool has_value = token.has_value;
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
    } else if (arg == "--port") {
      if (!take("--port")) continue;
      if (!parse_int_in(value, 0, 65535, o.port)) {
        r.errors.push_back(
            fmt::format("doctor: --port={}: expected a port (0: a free one)", value));
      }
    } else if (arg == "--ssh_timeout_ms") {
      if (!take("--ssh-timeout-ms")) continue;
      if (!parse_int_in(value, 1, 600000, o.ssh_timeout_ms)) {
        r.errors.push_back(
            fmt::format("doctor: --ssh-timeout-ms={}: expected milliseconds (1 to 600000)", value));
      }
    } else if (arg == "--probe_timeout") {
      if (!take("--probe-timeout")) continue;
      if (!parse_int_in(value, 1, 3600, o.probe_timeout_s)) {
        r.errors.push_back(
            fmt::format("doctor: --probe-timeout={}: expected seconds (1 to 3600)", value));
      }
    } else if (arg == "--stdin_lifeline") {
      o.stdin_lifeline = true;
    } else if (arg == "--connect_test") {
      if (!take("--connect-test")) continue;
      std::string host;
      int port = 0;
      if (!split_endpoint(value, host, port) || host.empty()) {
        r.errors.push_back(
            fmt::format("doctor: --connect-test={}: expected HOST:PORT or [V6]:PORT", value));
      } else {
        o.connect_test = value;
      }
    } else if (arg == "--timeout_ms") {
      if (!take("--timeout-ms")) continue;
      if (!parse_int_in(value, 1, 600000, o.timeout_ms)) {
        r.errors.push_back(
            fmt::format("doctor: --timeout-ms={}: expected milliseconds (1 to 600000)", value));
      }
    } else if (arg == "--bandwidth") {
      o.bandwidth = true;
    } else if (arg == "--nproc_per_node") {
      if (take("--nproc_per_node")) o.nproc_per_node = value;
    } else if (parse_sweep_flag(args, i, o.sweep, r.errors)) {
      sweep_flags_given = true;
    } else {
      r.errors.push_back(fmt::format("doctor: unknown argument '{}'", args[i]));
    }
  }
  if (!o.hostfile.empty() && !o.hosts.empty()) {
    r.errors.push_back("doctor: give --hostfile or -H, not both");
  }
  if (o.bandwidth) {
    check_sweep_options(o.sweep, r.errors);
    // One rank measures no link, but a 1-rank NCCL communicator runs the whole GPU path: the
    // check to make on a machine with one GPU.
    if (o.hostfile.empty() && o.hosts.empty() &&
        (o.nproc_per_node.empty() || o.nproc_per_node == "1") && o.backend != "nccl") {
      r.errors.push_back(
          "doctor: --bandwidth needs at least 2 ranks (1 with --backend nccl): give "
          "-H/--hostfile, or --nproc_per_node N for N ranks on this host");
    }
    if (o.json) r.errors.push_back("doctor: --bandwidth prints a table; --json is for the report");
    if (!o.connect_test.empty())
      r.errors.push_back("doctor: --connect-test is not for --bandwidth");
  } else {
    if (sweep_flags_given) {
      r.errors.push_back("doctor: -b/-e/-f/-n/-w/--op-timeout go with --bandwidth");
    }
    if (!o.nproc_per_node.empty()) {
      r.errors.push_back("doctor: --nproc_per_node goes with --bandwidth");
    }
  }
  return r;
}

std::string doctor_usage() {
  return "usage: mlrun doctor [--json] [--hostfile FILE | -H HOST[:SLOTS],...]\n"
         "                    [--backend auto|nccl|gloo|mpi] [--iface NAME|auto]\n"
         "                    [--master_addr ADDR] [--python-timeout SECONDS]\n"
         "                    [--port P] [--ssh-timeout-ms N] [--timeout-ms N]\n"
         "                    [--probe-timeout SECONDS]\n"
         "       mlrun doctor --bandwidth [--hostfile FILE | -H HOSTS | --nproc_per_node N]\n"
         "                    [--backend ...] [--iface ...] [-b 8] [-e 128M] [-f 2] [-n 20] [-w "
         "5]\n"
         "                    [--op-timeout SECONDS]\n"
         "\n"
         "Reports this host's GPUs, NCCL, Gloo, Open MPI and PyTorch, its network interfaces,\n"
         "and the backend, interface and variables mlrun would use here, with the reasons.\n"
         "--backend, --iface and --master_addr mean what they mean to `mlrun`.\n"
         "\n"
         "With --hostfile / -H, every other host gets its own section: SSH reachability (all\n"
         "hosts at once, each bounded by --ssh-timeout-ms), the same report made there, and\n"
         "whether it can reach the rendezvous port: doctor serves a rendezvous on this host on\n"
         "--port (default: a free one) and each host tries a TCP connect to it within\n"
         "--timeout-ms. The whole remote phase is bounded by --probe-timeout (default 60 s, or\n"
         "more when the other bounds add up to more); a host with no report by then is named.\n"
         "Exit code 1 when any host has a problem, 2 for a usage error.\n"
         "\n"
         "--bandwidth launches an all-reduce sweep (float32 sum, out of place) over the planned\n"
         "ranks through mlrun, with the backend a job would get: Gloo over TCP, or NCCL with\n"
         "one GPU per rank. It prints it as nccl-tests' all_reduce_perf does (sizes -b to -e,\n"
         "times -f; -n timed and -w warm-up iterations), checks every value, and compares the\n"
         "peak bus bandwidth with the chosen interface's link speed.\n";
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
  h.variables = doctor_variables(h.backend.name,
                                 network_variables(h.iface.name, h.infiniband, h.iface.subnet),
                                 Environment::current().entries());
  return h;
}

namespace {

std::string host_text(const HostReport& h) {
  std::string s;
  if (h.local) {
    s += fmt::format("host {} (this host)\n", h.host);
  } else {
    s += fmt::format("host {} (over SSH{})\n", h.host,
                     h.address.empty() ? "" : fmt::format("; this host is {} to it", h.address));
    if (!h.reachable) {
      s += fmt::format("  SSH         unreachable: {}\n", h.ssh_error);
      return s;
    }
    s += "  SSH         ok\n";
    if (h.probe_timed_out) {
      s += fmt::format("  Probe       {}\n", h.probe_error);
    } else if (!h.probe_error.empty()) {
      s += fmt::format("  Probe       failed: {}\n", h.probe_error);
    }
  }
  if (h.rendezvous_port) {
    const PortCheck& c = *h.rendezvous_port;
    if (c.ok) {
      s += fmt::format("  Rendezvous  reaches {} (TCP connect in {} ms)\n", c.target, c.elapsed_ms);
    } else {
      s += fmt::format("  Rendezvous  cannot reach {}: {}\n", c.target, c.error);
    }
  }
  if (!h.probe_error.empty()) return s;
  if (!h.hostname.empty()) s += fmt::format("  Hostname    {}\n", h.hostname);
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
  return s;
}

Component component_from(const nlohmann::json& j) {
  Component c;
  auto text = [&j](const char* key) {
    return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
  };
  c.found = j.at("found").get<bool>();
  c.checked = j.at("checked").get<bool>();
  c.how = text("how");
  c.version = text("version");
  c.path = text("path");
  c.note = text("note");
  return c;
}

std::string string_or_empty(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
}

// The command that makes one host's half of the report: `mlrun doctor --json --connect-test ...`
// there, toward this host's address on the connection, with the rendezvous port to try.
std::string remote_probe_command(const DoctorOptions& o, const std::string& address, int port) {
  // The job's workers get this host's PATH, LD_LIBRARY_PATH and PYTHON (DESIGN §6), so the
  // probe there runs with them too: it then finds what the job would find.
  std::string command = "exec env";
  for (const char* name : {"PATH", "LD_LIBRARY_PATH", "PYTHON"}) {
    if (const char* v = std::getenv(name))
      command += " " + shell_quote(fmt::format("{}={}", name, v));
  }
  // --stdin-lifeline: the probe there ends when its stdin does, i.e. when this doctor stops
  // waiting for it or dies; nothing is left running on a host that was given up on.
  std::vector<std::string> args = {self_path(),        "doctor",
                                   "--json",           "--stdin-lifeline",
                                   "--master_addr",    address,
                                   "--connect-test",   make_endpoint(address, port),
                                   "--timeout-ms",     std::to_string(o.timeout_ms),
                                   "--python-timeout", fmt::format("{}", o.python_timeout),
                                   "--backend",        o.backend,
                                   "--iface",          o.iface};
  for (const auto& a : args) command += " " + shell_quote(a);
  return command;
}

// One host's section from what its probe printed (stdout: the JSON report) and how it ended.
HostReport remote_section(const HostEntry& entry, const std::string& address, const RemoteExit& ex,
                          const std::string& out, const std::string& err) {
  HostReport h;
  h.host = entry.host;
  h.local = false;
  h.address = address;
  if (!ex.error.empty()) {
    h.probe_error = fmt::format("{} ({})", ex.error, self_path());
    return h;
  }
  try {
    nlohmann::json j = nlohmann::json::parse(out);
    HostReport probed = host_from_json(j.at("hosts").at(0));
    std::string name = probed.host;
    probed.host = entry.host;
    probed.hostname = name == entry.host ? "" : name;
    probed.local = false;
    probed.address = address;
    if (!probed.rendezvous_port) {
      probed.probe_error = "its mlrun did not report the rendezvous-port check (an older mlrun?)";
    }
    return probed;
  } catch (const std::exception& e) {
    std::string why = last_line(err);
    if (why.empty()) why = e.what();
    h.probe_error = fmt::format("`{} doctor --json` there {}: {}", self_path(),
                                ex.exit_code >= 0    ? fmt::format("exited with {}", ex.exit_code)
                                : !ex.signal.empty() ? fmt::format("died of SIG{}", ex.signal)
                                                     : std::string("ended without a status"),
                                why);
    return h;
  }
}

// A probe running on one host, its output collected as it comes.
struct RunningProbe {
  std::size_t index = 0;  // In the list of remote hosts.
  std::string address;
  std::optional<RemoteCommand> command;
  std::string out, err;
  bool out_open = true, err_open = true, ended = false;
};

// Reads what fd has now into sink (kept up to 1 MiB: a report is a few KiB); false at EOF.
bool drain(int fd, std::string& sink) {
  char buf[8192];
  while (true) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0) {
      if (sink.size() < (1u << 20)) sink.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
  }
}

// Collects every probe's output until each has ended or the deadline passes. A probe ends when
// its command is done and both of its pipes are drained.
void collect_probes(std::vector<RunningProbe>& probes, Clock::time_point deadline) {
  while (true) {
    std::vector<pollfd> fds;
    std::vector<std::pair<RunningProbe*, int>> owners;  // 0 stdout, 1 stderr, 2 done
    for (auto& p : probes) {
      if (p.ended) continue;
      if (p.out_open) fds.push_back({p.command->stdout_fd(), POLLIN, 0}), owners.push_back({&p, 0});
      if (p.err_open) fds.push_back({p.command->stderr_fd(), POLLIN, 0}), owners.push_back({&p, 1});
      fds.push_back({p.command->done_fd(), POLLIN, 0});
      owners.push_back({&p, 2});
    }
    if (fds.empty()) return;
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return;
    int n = poll(fds.data(), fds.size(), static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return;  // Not expected; the probes still running are reported as such.
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      auto [p, which] = owners[i];
      if (which == 0) p->out_open = drain(p->command->stdout_fd(), p->out);
      if (which == 1) p->err_open = drain(p->command->stderr_fd(), p->err);
      if (which == 2) {
        // Done: the pump closed both pipes' write ends first, so what is left ends in EOF.
        if (p->out_open) p->out_open = drain(p->command->stdout_fd(), p->out);
        if (p->err_open) p->err_open = drain(p->command->stderr_fd(), p->err);
        p->ended = !p->out_open && !p->err_open;
      }
    }
  }
}

// Every listed host other than this one: SSH to all at once, then the probe on each, all
// running together against a rendezvous served here on o.port, within one bound for the whole
// phase (remote_probe_limit_seconds). Returns 0, or 1 when nothing could be served.
int check_remote_hosts(const DoctorOptions& o, const std::vector<HostEntry>& hosts,
                       DoctorReport& report) {
  std::vector<HostEntry> remote;
  for (const auto& e : hosts) {
    if (is_local_host(e.host)) {
      if (report.hosts.front().host != e.host) {
        report.hosts.front().hostname = report.hosts.front().host;
        report.hosts.front().host = e.host;
      }
    } else {
      remote.push_back(e);
    }
  }
  if (remote.empty()) {
    report.remote_status = "every listed host is this host: nothing to check over SSH";
    return 0;
  }
  const int limit_s = remote_probe_limit_seconds(o);
  const auto deadline = Clock::now() + std::chrono::seconds(limit_s);
  // A real rendezvous server, on every address, as a job's head serves it.
  rendezvous::ServerOptions so;
  so.host = "0.0.0.0";
  so.port = o.port;
  so.token = random_hex(16);
  so.job_id = "mlrun-doctor";
  so.log = [](std::string_view) {};  // The probes connect and never authenticate.
  std::optional<rendezvous::Server> server;
  try {
    server.emplace(rendezvous::Server::start(so));
  } catch (const std::exception& e) {
    fmt::print(stderr, "mlrun: error: cannot serve the rendezvous for the check on port {}: {}\n",
               o.port, e.what());
    return 1;
  }
  report.rendezvous_port = server->port();
  std::vector<SshTarget> targets;
  for (const auto& e : remote) targets.push_back({e.host, e.user, e.port});
  SshOptions ssh;
  ssh.connect_timeout = std::chrono::milliseconds(o.ssh_timeout_ms);
  auto sessions = connect_all(targets, ssh);
  std::vector<HostReport> sections(remote.size());
  std::vector<RunningProbe> probes;
  for (std::size_t i = 0; i < remote.size(); ++i) {
    if (auto* e = std::get_if<SshError>(&sessions[i])) {
      sections[i].host = remote[i].host;
      sections[i].local = false;
      sections[i].reachable = false;
      sections[i].ssh_error = e->what();
      continue;
    }
    auto& session = std::get<SshSession>(sessions[i]);
    RunningProbe p;
    p.index = i;
    p.address = session.local_address();
    p.command.emplace(RemoteCommand::start(
        std::move(session), remote_probe_command(o, p.address, report.rendezvous_port), ""));
    probes.push_back(std::move(p));
  }
  // Every probe runs at once; a host that has not answered by the deadline is given up on:
  // its connection is closed, which ends the probe there (its stdin lifeline).
  collect_probes(probes, deadline);
  for (auto& p : probes) {
    if (p.ended) {
      sections[p.index] =
          remote_section(remote[p.index], p.address, p.command->wait(), p.out, p.err);
      continue;
    }
    p.command->stop();
    HostReport& h = sections[p.index];
    h.host = remote[p.index].host;
    h.local = false;
    h.address = p.address;
    h.probe_timed_out = true;
    h.probe_error = fmt::format(
        "no report within {} s (--probe-timeout; the host accepted SSH, but `mlrun doctor` there "
        "did not finish: a hung command, file system or driver?)",
        limit_s);
  }
  probes.clear();  // Waits for each pump; a stopped one ends at once.
  for (auto& s : sections) report.hosts.push_back(std::move(s));
  report.remote_status = fmt::format(
      "SSH to {} host{}, each probed there within {} s; rendezvous port {} served on this host "
      "for the check",
      remote.size(), remote.size() == 1 ? "" : "s", limit_s, report.rendezvous_port);
  return 0;
}

// --stdin-lifeline: a remote probe's stdin is its SSH channel's; its EOF means the doctor that
// asked has given up on this host (its bound passed) or is gone. The probe then leaves at once,
// with the command it was waiting for, so that nothing is left running there. Exiting from a
// thread is this command's own top-level choice: the report it would print has no reader.
void watch_stdin_lifeline() {
  std::thread([] {
    char buf[256];
    while (true) {
      ssize_t n = read(STDIN_FILENO, buf, sizeof buf);
      if (n > 0 || (n < 0 && errno == EINTR)) continue;
      break;
    }
    if (pid_t child = g_probe_child.load(); child > 0) kill(-child, SIGKILL);
    _exit(1);
  }).detach();
}

// --bandwidth: the sweep's job, launched through mlrun itself; rank 0's table is passed through
// without its "[0] " tag.
int bandwidth_command(const DoctorOptions& o) {
  std::string self = self_path();
  std::vector<std::string> argv = {self};
  if (!o.hostfile.empty()) argv.insert(argv.end(), {"--hostfile", o.hostfile});
  if (!o.hosts.empty()) argv.insert(argv.end(), {"-H", o.hosts});
  if (!o.nproc_per_node.empty()) argv.insert(argv.end(), {"--nproc_per_node", o.nproc_per_node});
  argv.insert(argv.end(), {"--backend", o.backend});
  if (o.iface != "auto") argv.insert(argv.end(), {"--iface", o.iface});
  if (!o.master_addr.empty()) argv.insert(argv.end(), {"--master_addr", o.master_addr});
  // Each rank runs the sweep program installed next to mlrun (it alone loads Gloo or CUDA).
  std::string sweep =
      (std::filesystem::path(self).parent_path() / "mlrun-allreduce-sweep").string();
  if (access(sweep.c_str(), X_OK) != 0) {
    fmt::print(stderr,
               "mlrun: error: doctor --bandwidth: {} not found: it is built and installed with "
               "mlrun, next to it\n",
               sweep);
    return 2;
  }
  argv.insert(argv.end(), {"--no_python", sweep});
  for (auto& f : sweep_flags(o.sweep)) argv.push_back(f);
  std::vector<std::string> shown;
  for (const auto& a : argv) {
    shown.push_back(a.find_first_of(" '\"$") == std::string::npos ? a : shell_quote(a));
  }
  fmt::print("# {}\n", fmt::join(shown, " "));
  std::fflush(stdout);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    fmt::print(stderr, "mlrun: error: pipe: {}\n", std::strerror(errno));
    return 1;
  }
  std::vector<char*> cargv;
  for (auto& a : argv) cargv.push_back(a.data());
  cargv.push_back(nullptr);
  pid_t pid = fork();
  if (pid < 0) {
    fmt::print(stderr, "mlrun: error: fork: {}\n", std::strerror(errno));
    return 1;
  }
  if (pid == 0) {
    dup2(fds[1], STDOUT_FILENO);
    execv(cargv[0], cargv.data());
    _exit(127);
  }
  close(fds[1]);
  // Ctrl-C reaches the launcher too (same process group); it stops the ranks and exits, and
  // this process reports its exit code.
  signal(SIGINT, SIG_IGN);
  std::string pending;
  char buf[4096];
  auto emit = [](std::string_view line) {
    if (line.rfind("[0] ", 0) == 0) line.remove_prefix(4);
    fmt::print("{}\n", line);
    std::fflush(stdout);
  };
  while (true) {
    ssize_t n = read(fds[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    pending.append(buf, static_cast<std::size_t>(n));
    std::size_t nl;
    while ((nl = pending.find('\n')) != std::string::npos) {
      emit(std::string_view(pending).substr(0, nl));
      pending.erase(0, nl + 1);
    }
  }
  if (!pending.empty()) emit(pending);
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  signal(SIGINT, SIG_DFL);
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1;
}

}  // namespace

int remote_probe_limit_seconds(const DoctorOptions& o) {
  if (o.probe_timeout_s > 0) return o.probe_timeout_s;
  double own = o.ssh_timeout_ms / 1000.0 + kMpirunTimeoutSeconds + o.python_timeout +
               o.timeout_ms / 1000.0 + 15;
  return std::max(kProbeTimeoutSeconds, static_cast<int>(std::ceil(own)));
}

PortCheck tcp_connect_test(const std::string& endpoint, int timeout_ms) {
  PortCheck c;
  c.target = endpoint;
  std::string host;
  int port = 0;
  if (!split_endpoint(endpoint, host, port)) {
    c.error = "not HOST:PORT";
    return c;
  }
  auto start = Clock::now();
  auto elapsed = [&start] {
    return static_cast<long>(
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count());
  };
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  int gai = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res);
  if (gai != 0 || res == nullptr) {
    c.error = fmt::format("cannot resolve {}: {}", host, gai_strerror(gai));
    return c;
  }
  int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    c.error = fmt::format("socket: {}", std::strerror(errno));
    freeaddrinfo(res);
    return c;
  }
  int rc = connect(fd, res->ai_addr, res->ai_addrlen);
  freeaddrinfo(res);
  int err = rc == 0 ? 0 : errno;
  if (rc != 0 && err == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    while (true) {
      long left = timeout_ms - elapsed();
      if (left <= 0) {
        err = ETIMEDOUT;
        break;
      }
      int n = poll(&p, 1, static_cast<int>(left));
      if (n < 0 && errno == EINTR) continue;
      if (n == 0) {
        err = ETIMEDOUT;
        break;
      }
      socklen_t len = sizeof err;
      if (n < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
      break;
    }
  }
  close(fd);
  c.elapsed_ms = elapsed();
  if (err == 0) {
    c.ok = true;
  } else if (err == ETIMEDOUT) {
    c.error = fmt::format("timed out after {} ms (a firewall?)", timeout_ms);
  } else if (err == ECONNREFUSED) {
    c.error = "refused (nothing listens there, or a firewall rejects the connection)";
  } else {
    c.error = std::strerror(err);
  }
  return c;
}

std::vector<std::string> host_problems(const HostReport& h) {
  std::vector<std::string> p;
  if (!h.reachable) {
    p.push_back(fmt::format("{} is unreachable over SSH: {}", h.host, h.ssh_error));
    return p;
  }
  if (h.rendezvous_port && !h.rendezvous_port->ok) {
    p.push_back(fmt::format("{} cannot reach {}: {}", h.host, h.rendezvous_port->target,
                            h.rendezvous_port->error));
  }
  if (h.probe_timed_out) {
    p.push_back(fmt::format("{}: {}", h.host, h.probe_error));
  } else if (!h.probe_error.empty()) {
    p.push_back(fmt::format("{}: probe failed: {}", h.host, h.probe_error));
  }
  for (const auto& e : h.errors) p.push_back(fmt::format("{}: {}", h.host, e));
  return p;
}

std::string format_doctor_text(const DoctorReport& report) {
  std::string s;
  std::vector<std::string> problems;
  for (const auto& h : report.hosts) {
    s += host_text(h);
    for (auto& p : host_problems(h)) problems.push_back(std::move(p));
  }
  if (!report.remote_hosts.empty()) {
    s += fmt::format("remote checks ({}): {}\n", report.remote_hosts, report.remote_status);
  } else {
    s += fmt::format("remote checks: {}\n", report.remote_status);
  }
  if (problems.empty()) {
    s += "no problems found\n";
  } else {
    s += fmt::format("{} problem{}:\n", problems.size(), problems.size() == 1 ? "" : "s");
    for (const auto& p : problems) s += fmt::format("  {}\n", p);
  }
  return s;
}

nlohmann::json host_json(const HostReport& h) {
  nlohmann::json port;
  if (h.rendezvous_port) {
    const PortCheck& c = *h.rendezvous_port;
    port = {{"target", c.target},
            {"ok", c.ok},
            {"error", or_null(c.error)},
            {"elapsed_ms", c.elapsed_ms}};
  }
  nlohmann::json j = {
      {"host", h.host},
      {"hostname", or_null(h.hostname)},
      {"local", h.local},
      {"reachable", h.reachable},
      {"ssh", h.local ? nlohmann::json()
                      : nlohmann::json{{"ok", h.reachable}, {"error", or_null(h.ssh_error)}}},
      {"probe_error", or_null(h.probe_error)},
      {"probe_timed_out", h.probe_timed_out},
      {"address", or_null(h.address)},
      {"rendezvous_port", port},
      {"problems", host_problems(h)}};
  // An unreachable or unprobed host has no facts to show; its object says only why.
  if (!h.reachable || !h.probe_error.empty()) return j;
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
    vars.push_back({{"name", v.name},
                    {"value", v.value},
                    {"default", v.is_default},
                    {"user_value", v.user_value ? nlohmann::json(*v.user_value) : nlohmann::json()},
                    {"effective", (v.user_value && v.is_default ? *v.user_value : v.value)}});
  }
  nlohmann::json gpus = {{"device_files", h.gpus.device_files},
                         {"visible", h.gpus.visible},
                         {"models", h.gpus.models}};
  gpus["cuda_visible_devices"] =
      h.gpus.cuda_visible_devices ? nlohmann::json(*h.gpus.cuda_visible_devices) : nlohmann::json();
  nlohmann::json iface = {{"name", or_null(h.iface.name)},
                          {"reason", h.iface.reason},
                          {"warning", or_null(h.iface.warning)}};
  j["gpus"] = gpus;
  j["nccl"] = component_json(h.nccl);
  j["gloo"] = component_json(h.gloo);
  j["openmpi"] = component_json(h.mpi);
  j["torch"] = component_json(h.torch);
  j["infiniband"] = h.infiniband;
  j["interfaces"] = interfaces;
  j["master_addr"] = or_null(h.master_addr);
  j["interface"] = iface;
  j["backend"] = {{"name", h.backend.name}, {"reason", h.backend.reason}};
  j["variables"] = vars;
  j["errors"] = h.errors;
  return j;
}

HostReport host_from_json(const nlohmann::json& j) {
  HostReport h;
  h.host = j.at("host").get<std::string>();
  h.hostname = string_or_empty(j, "hostname");
  h.local = j.at("local").get<bool>();
  h.reachable = j.value("reachable", true);
  if (j.contains("ssh") && j["ssh"].is_object()) h.ssh_error = string_or_empty(j["ssh"], "error");
  h.probe_error = string_or_empty(j, "probe_error");
  h.probe_timed_out = j.value("probe_timed_out", false);
  h.address = string_or_empty(j, "address");
  if (j.contains("rendezvous_port") && j["rendezvous_port"].is_object()) {
    const auto& p = j["rendezvous_port"];
    h.rendezvous_port = PortCheck{p.at("target").get<std::string>(), p.at("ok").get<bool>(),
                                  string_or_empty(p, "error"), p.at("elapsed_ms").get<long>()};
  }
  if (!h.reachable || !h.probe_error.empty()) return h;
  const auto& g = j.at("gpus");
  h.gpus.device_files = g.at("device_files").get<int>();
  h.gpus.visible = g.at("visible").get<int>();
  h.gpus.models = g.at("models").get<std::vector<std::string>>();
  if (g.contains("cuda_visible_devices") && g["cuda_visible_devices"].is_string()) {
    h.gpus.cuda_visible_devices = g["cuda_visible_devices"].get<std::string>();
  }
  h.nccl = component_from(j.at("nccl"));
  h.gloo = component_from(j.at("gloo"));
  h.mpi = component_from(j.at("openmpi"));
  h.torch = component_from(j.at("torch"));
  h.infiniband = j.at("infiniband").get<bool>();
  for (const auto& ij : j.at("interfaces")) {
    NetInterface i;
    i.name = ij.at("name").get<std::string>();
    std::string kind = ij.at("kind").get<std::string>();
    i.infiniband = kind == "InfiniBand";
    i.loopback = kind == "loopback";
    i.is_virtual = kind == "virtual";
    i.up = ij.at("up").get<bool>();
    i.speed_mbps = ij.at("speed_mbps").is_number() ? ij["speed_mbps"].get<int>() : -1;
    for (const auto& a : ij.at("addresses")) {
      InterfaceAddress addr;
      addr.text = a.get<std::string>();
      i.addresses.push_back(addr);
    }
    h.interfaces.push_back(std::move(i));
  }
  h.master_addr = string_or_empty(j, "master_addr");
  const auto& ic = j.at("interface");
  h.iface.name = string_or_empty(ic, "name");
  h.iface.reason = string_or_empty(ic, "reason");
  h.iface.warning = string_or_empty(ic, "warning");
  h.backend.name = j.at("backend").at("name").get<std::string>();
  h.backend.reason = j.at("backend").at("reason").get<std::string>();
  for (const auto& v : j.at("variables")) {
    DoctorVariable d;
    d.name = v.at("name").get<std::string>();
    d.value = v.at("value").get<std::string>();
    d.is_default = v.at("default").get<bool>();
    if (v.contains("user_value") && v["user_value"].is_string()) {
      d.user_value = v["user_value"].get<std::string>();
    }
    h.variables.push_back(std::move(d));
  }
  h.errors = j.at("errors").get<std::vector<std::string>>();
  return h;
}

nlohmann::json doctor_json(const DoctorReport& report) {
  nlohmann::json hosts = nlohmann::json::array();
  nlohmann::json problems = nlohmann::json::array();
  for (const auto& h : report.hosts) {
    hosts.push_back(host_json(h));
    for (const auto& p : host_problems(h)) problems.push_back(p);
  }
  return {
      {"hosts", hosts},
      {"ok", problems.empty()},
      {"problems", problems},
      {"remote",
       {{"hosts", or_null(report.remote_hosts)},
        {"rendezvous_port",
         report.rendezvous_port == 0 ? nlohmann::json() : nlohmann::json(report.rendezvous_port)},
        {"status", report.remote_status}}}};
}

int doctor_command(const std::vector<std::string>& args) {
  // 0. The hidden mode that every rank of `doctor --bandwidth` runs.
  if (!args.empty() && args[0] == "--allreduce-sweep") {
    return allreduce_sweep_command({args.begin() + 1, args.end()});
  }
  // 1. Flags: every user error reported together.
  DoctorArgs parsed = parse_doctor_args(args);
  if (parsed.options.help) {
    fmt::print("{}", doctor_usage());
    return 0;
  }
  for (const auto& e : parsed.errors) fmt::print(stderr, "mlrun: error: {}\n", e);
  if (!parsed.errors.empty()) return 2;
  const DoctorOptions& o = parsed.options;
  if (o.stdin_lifeline) watch_stdin_lifeline();
  if (o.bandwidth) return bandwidth_command(o);
  // 2. The hosts asked for, read before anything is probed: a bad hostfile is a usage error.
  HostList hosts;
  if (!o.hostfile.empty() || !o.hosts.empty()) {
    hosts = o.hostfile.empty() ? parse_host_list(o.hosts) : read_hostfile(o.hostfile);
    for (const auto& e : hosts.errors) fmt::print(stderr, "mlrun: error: {}\n", format_error(e));
    if (!hosts.ok()) return 2;
  }
  // 3. This host: hardware, libraries, interfaces, and what the launcher would choose; the
  //    port check when this is the remote side of one.
  DoctorReport report;
  report.hosts.push_back(probe_local_host(o));
  if (!o.connect_test.empty()) {
    report.hosts.front().rendezvous_port = tcp_connect_test(o.connect_test, o.timeout_ms);
  }
  // 4. Other hosts: SSH to all at once, the same probe on each, and the rendezvous port.
  if (!o.hostfile.empty()) {
    report.remote_hosts = fmt::format("--hostfile {}", o.hostfile);
  } else if (!o.hosts.empty()) {
    report.remote_hosts = fmt::format("-H {}", o.hosts);
  }
  if (report.remote_hosts.empty()) {
    report.remote_status = "none (give --hostfile or -H to check other hosts)";
  } else if (int rc = check_remote_hosts(o, hosts.hosts, report); rc != 0) {
    return rc;
  }
  // 5. Print.
  if (o.json) {
    fmt::print("{}\n", doctor_json(report).dump(2));
  } else {
    fmt::print("{}", format_doctor_text(report));
  }
  for (const auto& h : report.hosts) {
    if (!host_problems(h).empty()) return 1;
  }
  return 0;
}

}  // namespace mlrun
