// `mlrun doctor` (docs/design.md §7): what this machine has for distributed training, and what
// mlrun would choose and set here, and why. The probes (device files, dlopen, mpirun --version, a
// bounded python start) fill a plain report; formatting it as text or JSON is pure and
// unit-tested. The report holds one section per host: with --hostfile / -H, doctor connects to
// every host at once over SSH, runs `mlrun doctor --json --connect-test HEAD:PORT` there against
// a rendezvous server it serves for the purpose, and parses each host's JSON back into its
// section (host_from_json), so that a host that cannot be reached, or cannot reach the
// rendezvous port, is reported by name.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "launcher/backend.h"

#include "doctor/bandwidth.h"
#include "launcher/flags.h"
#include "worker/network.h"

namespace mlrun::doctor {

/// `mlrun doctor` flags.
struct DoctorOptions {
  bool json = false;             ///< --json: the report as one JSON object.
  bool help = false;             ///< -h / --help.
  std::string hostfile;          ///< --hostfile F: hosts for the remote checks.
  std::string hosts;             ///< -H / --hosts LIST.
  std::string master_addr;       ///< --master_addr: the interface choice prefers its subnet.
  std::string iface = "auto";    ///< --iface NAME|auto, as the launcher takes it.
  std::string backend = "auto";  ///< --backend auto|nccl|gloo|mpi, as the launcher takes it.
  double python_timeout = 20;    ///< --python-timeout SECONDS for the PyTorch probe; 0 skips it.
  int port = 0;                  ///< --port P: the rendezvous port checked; 0: a free one.
  int ssh_timeout_ms = 10000;    ///< --ssh-timeout-ms: bounds each SSH connect.
  /// --probe-timeout SECONDS: bounds the whole remote phase (SSH connects and every host's
  /// probe); 0: remote_probe_limit_seconds' default.
  int probe_timeout_s = 0;
  /// --stdin-lifeline (hidden; what a remote probe is run with): exit, with the probe's child,
  /// when stdin reaches EOF, i.e. when the doctor that started it over SSH gives up or dies.
  bool stdin_lifeline = false;
  /// --connect-test HOST:PORT: a TCP connect to it within timeout_ms, added to this host's
  /// section (what the remote side of the port check runs).
  std::string connect_test;
  int timeout_ms = 3000;       ///< --timeout-ms N: bound of --connect-test.
  bool bandwidth = false;      ///< --bandwidth: the all-reduce sweep instead of the report.
  std::string nproc_per_node;  ///< --nproc_per_node, passed to the sweep's launch.
  SweepOptions sweep;          ///< -b -e -f -n -w --op-timeout of --bandwidth.
};

struct DoctorArgs {
  DoctorOptions options;
  std::vector<std::string> errors;  ///< Every user error, in order.
};

/// The table of `mlrun doctor`'s flags, writing into r.options (a bad value appends to r.errors);
/// sweep_given is set by any of the sweep's flags (-b -e -f -n -w --op-timeout).
FlagTable doctor_flag_table(DoctorArgs& r, bool& sweep_given);

/// Parses the arguments after the word `doctor`.
DoctorArgs parse_doctor_args(const std::vector<std::string>& args);

/// The `mlrun doctor --help` text.
std::string doctor_usage();

/// Whether a library or tool was found, which version, where, and how that was determined.
struct Component {
  bool found = false;
  bool checked = true;  ///< false: the check was skipped or ran out of time; found means nothing.
  std::string version;  ///< Empty when not known.
  std::string path;     ///< The file found (library or executable).
  std::string how;      ///< How it was determined: "dlopen libnccl.so.2 + ncclGetVersion".
  std::string note;     ///< Why not found, or a caveat; may be empty.
};

struct GpuReport {
  int device_files = 0;  ///< /dev/nvidiaN.
  int visible = 0;       ///< What workers see: CUDA_VISIBLE_DEVICES when set, else the above.
  std::optional<std::string> cuda_visible_devices;
  std::vector<std::string> models;  ///< "Model:" of /proc/driver/nvidia/gpus/*/information.
};

/// A TCP connect from a host to the rendezvous port.
struct PortCheck {
  std::string target;  ///< "10.77.0.1:29500".
  bool ok = false;
  std::string error;  ///< "timed out after 3000 ms (a firewall?)", "refused (...)", ...
  long elapsed_ms = 0;
};

/// A TCP connect to endpoint ("host:port", "[v6]:port") bounded by timeout_ms.
PortCheck tcp_connect_test(const std::string& endpoint, int timeout_ms);

/// One variable mlrun would set for every worker.
struct DoctorVariable {
  std::string name;
  std::string value;                      ///< mlrun's value.
  std::optional<std::string> user_value;  ///< The environment's own value, which wins.
  bool is_default = true;                 ///< A default (the user wins) or always set.
};

/// One host's section of the report.
struct HostReport {
  std::string host;      ///< As listed (hostfile, -H), or this host's name.
  std::string hostname;  ///< The host's own name, where it differs from host; else empty.
  bool local = true;
  bool via_srun = false;  ///< Probed through srun in a Slurm allocation, not over SSH.
  /// Remote hosts: whether SSH worked (ssh_error says why not) and the probe's report came back
  /// (probe_error says why not). Without them the sections below are empty.
  bool reachable = true;
  std::string ssh_error;
  std::string probe_error;
  bool probe_timed_out = false;  ///< No report within the phase's bound (probe_error says so).
  std::string address;  ///< Remote hosts: the head's address toward it (its --master_addr).
  std::optional<PortCheck> rendezvous_port;
  GpuReport gpus;
  /// NUMA nodes and each GPU's node (what --numa_binding follows), one line.
  std::string numa;
  /// How teardown reaches a job's processes here (worker/cgroup.h): "cgroup v2 at PATH" or
  /// "process groups: REASON".
  std::string teardown;
  Component nccl, gloo, mpi, torch;
  std::vector<NetInterface> interfaces;
  bool infiniband = false;  ///< An InfiniBand device exists (/sys/class/infiniband).
  std::string master_addr;  ///< What the interface choice was made against; empty: none.
  InterfaceChoice iface;
  BackendChoice backend;
  std::vector<DoctorVariable> variables;
  std::vector<std::string> errors;  ///< A flag this host cannot honour (--iface of a missing one).
};

struct DoctorReport {
  std::vector<HostReport> hosts;  ///< This host first.
  /// The multi-node part: which hosts were asked for ("-H a,b", "--hostfile F"); empty when none
  /// were given. rendezvous_port: the port served on this host for the check (0: none).
  std::string remote_hosts;
  int rendezvous_port = 0;
  std::string remote_status;
};

/// Default bound of the remote phase of `mlrun doctor -H/--hostfile`, in seconds.
constexpr int kProbeTimeoutSeconds = 60;

/// The bound of the remote phase: --probe-timeout when given; else kProbeTimeoutSeconds, or more
/// when the probes' own bounds (SSH connect, mpirun --version's 10 s, --python-timeout, the
/// --timeout-ms connect test) add up to more, with 15 s to spare, so that a healthy but slow
/// host is never cut off by default.
int remote_probe_limit_seconds(const DoctorOptions& o);

/// The problems of one host, one line each, naming it ("host2 cannot reach 10.77.0.1:P: ...").
std::vector<std::string> host_problems(const HostReport& h);

/// One host's section as JSON (an element of doctor_json's "hosts"), and back: a remote host's
/// `doctor --json` is parsed with host_from_json. Throws nlohmann::json::exception on a
/// malformed object.
nlohmann::json host_json(const HostReport& h);
HostReport host_from_json(const nlohmann::json& j);

/// The "Model:" value of a /proc/driver/nvidia/gpus/*/information file; empty when absent.
std::string parse_gpu_model(std::string_view information);

/// The "Version:" of package in dpkg's status file text, when it is installed; else empty.
std::string dpkg_installed_version(std::string_view status, std::string_view package);

/// "InfiniBand", "loopback", "virtual" or "ethernet" (any other physical interface).
std::string interface_kind(const NetInterface& i);

/// The variables mlrun would set (MLRUN_BACKEND always; the network defaults unless the user's
/// environment has them), each with the user's value where env has one. env is "NAME=value".
std::vector<DoctorVariable> doctor_variables(
    const std::string& backend, const std::vector<std::pair<std::string, std::string>>& defaults,
    const std::vector<std::string>& env);

/// Probes this host.
HostReport probe_local_host(const DoctorOptions& options);

/// The report as text for a terminal.
std::string format_doctor_text(const DoctorReport& report);
/// The report as JSON (the --json schema; see docs/backends.md).
nlohmann::json doctor_json(const DoctorReport& report);

/// `mlrun doctor [--json] [--hostfile F | -H LIST] ...`: prints the report; 0, 1 when any host
/// has a problem (SSH, the rendezvous port, a flag it cannot honour), or 2 for a usage error.
/// `--bandwidth` runs the all-reduce sweep instead (doctor/bandwidth.h), and the hidden
/// `--allreduce-sweep` is one rank of it.
int doctor_command(const std::vector<std::string>& args);

}  // namespace mlrun::doctor
