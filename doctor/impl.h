// `mlrun doctor`'s insides, shared by its source files (internal, not installed):
//   doctor.cc  the command: its flags, the report's steps, and --bandwidth's launch
//   probe.cc   this host's probes (GPUs, NCCL, Gloo, Open MPI, PyTorch) and what the
//              launcher would choose here
//   report.cc  the report as text and as JSON, and a remote host's JSON read back
//   remote.cc  other hosts over SSH within one bound, the rendezvous-port connect test,
//              and a remote probe's stdin lifeline
//   slurm.cc   inside a Slurm allocation: the job, its nodes, the per-node probes through srun
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "doctor/doctor.h"
#include "hostfiles/hostfile.h"

#include "transport/slurm_env.h"

namespace mlrun::doctor {

using Clock = std::chrono::steady_clock;

/// Bound of the Open MPI probe's `mpirun --version`; the remote phase's default bound counts it.
inline constexpr double kMpirunTimeoutSeconds = 10;

/// The probe run_bounded is waiting for (0: none), for the stdin lifeline to kill on its way out.
extern std::atomic<pid_t> g_probe_child;

/// The last line of s, white space trimmed: what a failed command's output says last.
std::string last_line(std::string_view s);

/// Adds a section for every host in hosts other than this one (SSH, the probe there, the
/// rendezvous port) to report, and sets its remote_status. Returns 0, or 1 when the rendezvous
/// for the port check could not be served (the error is printed).
int check_remote_hosts(const DoctorOptions& o, const std::vector<HostEntry>& hosts,
                       DoctorReport& report);

/// Inside a Slurm allocation without --hostfile/-H: the job, its nodes and Slurm's version and
/// KillWait in remote_hosts, and every node's section probed through one srun step (with the
/// rendezvous port check toward this host). Returns 0, 1 when srun, scontrol or the port's
/// server is missing, 2 for a malformed node list (each error printed).
int check_slurm_nodes(const DoctorOptions& o, const transport::SlurmEnv& slurm,
                      DoctorReport& report);

/// --stdin-lifeline: exits this process, and the probe it waits for, when stdin reaches EOF.
void watch_stdin_lifeline();

}  // namespace mlrun::doctor
