// The Slurm transport: every node's agent through one srun step inside the allocation
// (docs/slurm.md), the way Open MPI starts its daemons: explicit --nodes/--ntasks/
// --ntasks-per-node (the allocation's variables are srun's inputs too), --overlap (a user's own
// srun in the job must not wait for ours), --kill-on-bad-exit, --mpi=none, --cpu-bind=none,
// --input=none, and no GPU or CPU option, so that each agent sees all of its node's GPUs.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "transport/transport.h"

namespace mlrun::transport {

/// What `scontrol show config` says that the transport needs.
struct SlurmConfig {
  std::string version;               ///< SLURM_VERSION, "22.05.8".
  std::chrono::seconds kill_wait{};  ///< KillWait: SIGTERM to SIGKILL when Slurm stops a job.
};

/// Parses `scontrol show config` output; missing fields stay empty / zero.
SlurmConfig parse_slurm_config(const std::string& text);

/// Why mlrun refuses this Slurm version, or empty. 20.11.0 to 20.11.2 made every step take its
/// CPUs exclusively, so the agents' step and any second srun in the job wait for each other
/// (Open MPI issue 8378); 20.11.3 restored sharing and added --overlap.
std::string refuse_slurm_version(const std::string& version);

/// The grace period each agent gives its workers between SIGTERM and SIGKILL: the user's, but
/// short enough to end before Slurm's own SIGKILL (KillWait after its SIGTERM): KillWait less
/// 2 s, and at least half of it.
std::chrono::milliseconds grace_within_kill_wait(std::chrono::milliseconds wanted,
                                                 std::chrono::seconds kill_wait);

/// The transport for the allocation this process runs in. Reads Slurm's configuration (version,
/// KillWait); a refused version or a missing srun is an error in errors and nullptr.
std::unique_ptr<Transport> make_slurm_transport(std::vector<std::string>& errors,
                                                SlurmConfig* config);

/// srun's argument vector for the agents' step on nodes (srun resolved, agent the agent's
/// argv). Exposed for the unit test of its options.
std::vector<std::string> srun_argv(const std::string& srun, const std::vector<AgentNode>& nodes,
                                   const std::vector<std::string>& agent);

/// The one record every agent of the step is handed in MLRUN_AGENT_JOB: every node, each agent
/// finds its own; without the token, which travels in MLRUN_RDZV_TOKEN.
AgentJob every_node_job(const AgentJob& job, const std::vector<AgentNode>& nodes);

}  // namespace mlrun::transport
