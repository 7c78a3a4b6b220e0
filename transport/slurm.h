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
#include "worker/process.h"

namespace mlrun::transport {

/// What `scontrol show config` says that the transport needs.
struct SlurmConfig {
  std::string version;               ///< SLURM_VERSION, "22.05.8".
  std::chrono::seconds kill_wait{};  ///< KillWait: SIGTERM to SIGKILL when Slurm stops a job.
};

/// Parses `scontrol show config` output; missing fields stay empty / zero.
SlurmConfig parse_slurm_config(const std::string& text);

/// The answer of a running `scontrol show config` (query), parsed; why says why there is none.
SlurmConfig read_slurm_config(BoundedChild& query, std::string& why);

/// Where the head publishes each agent's grace period (milliseconds) in its rendezvous, once
/// KillWait is known: after srun started the agents, so that `scontrol show config` is not on
/// the start's critical path (docs/slurm.md, "The agents' step").
inline constexpr const char* kSlurmGraceKey = "mlrun/slurm/grace_ms";

/// An agent's grace period as its head publishes it under kSlurmGraceKey (waits for it).
/// Throws rendezvous errors (AbortedError: the head ended the job, e.g. for a refused version).
std::chrono::milliseconds slurm_grace_from_head(const std::string& endpoint,
                                                const std::string& token,
                                                const std::string& job_id);

/// Why mlrun refuses this Slurm version, or empty. 20.11.0 to 20.11.2 made every step take its
/// CPUs exclusively, so the agents' step and any second srun in the job wait for each other
/// (Open MPI issue 8378); 20.11.3 restored sharing and added --overlap.
std::string refuse_slurm_version(const std::string& version);

/// The grace period each agent gives its workers between SIGTERM and SIGKILL: the user's, but
/// short enough to end before Slurm's own SIGKILL (KillWait after its SIGTERM): KillWait less
/// 2 s, and at least half of it.
std::chrono::milliseconds grace_within_kill_wait(std::chrono::milliseconds wanted,
                                                 std::chrono::seconds kill_wait);

/// The transport for the allocation this process runs in; a missing srun or scontrol is an
/// error in errors and nullptr. start() asks for Slurm's configuration (version, KillWait) once
/// srun is on its way, and reads the answer while srun starts the agents: a refused version (or
/// no answer)
/// aborts the job through on_lost (node -1) before any worker starts, since each agent waits
/// for its grace period (kSlurmGraceKey), which the head publishes only for an accepted one.
std::unique_ptr<Transport> make_slurm_transport(std::vector<std::string>& errors);

/// srun's argument vector for the agents' step on nodes (srun resolved, agent the agent's
/// argv). Exposed for the unit test of its options.
std::vector<std::string> srun_argv(const std::string& srun, const std::vector<AgentNode>& nodes,
                                   const std::vector<std::string>& agent);

/// The one record every agent of the step is handed in MLRUN_AGENT_JOB: every node, each agent
/// finds its own; without the token, which travels in MLRUN_RDZV_TOKEN.
AgentJob every_node_job(const AgentJob& job, const std::vector<AgentNode>& nodes);

}  // namespace mlrun::transport
