// What mlrun reads from Slurm (docs/slurm.md "What mlrun reads from Slurm"): whether it runs
// inside an allocation or inside a step, the allocation's nodes and slots, and the choice of
// transport that follows (--launcher auto|local|ssh|slurm). Pure functions of the environment
// given to them, so that every case is unit-tested without Slurm.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "hostfiles/hostfile.h"
#include "launcher/options.h"

namespace mlrun::transport {

/// The Slurm variables mlrun uses, as found in an environment.
struct SlurmEnv {
  std::string job_id;          ///< SLURM_JOB_ID (or SLURM_JOBID); empty: not in an allocation.
  std::string step_id;         ///< SLURM_STEP_ID; set: this process is a task of an srun step.
  std::string nodelist;        ///< SLURM_JOB_NODELIST (or SLURM_NODELIST).
  std::string tasks_per_node;  ///< SLURM_TASKS_PER_NODE ("2(x3),1").
  bool ntasks_given = false;   ///< SLURM_NTASKS or SLURM_NTASKS_PER_NODE: the user asked for tasks.
  std::string step_nodelist;   ///< SLURM_STEP_NODELIST.
  std::string step_num_nodes;  ///< SLURM_STEP_NUM_NODES.
  std::string step_tasks_per_node;  ///< SLURM_STEP_TASKS_PER_NODE ("2,1", "1(x4)").
  std::string node_id;         ///< SLURM_NODEID: this node's index in the step.

  bool in_allocation() const { return !job_id.empty(); }
  bool in_step() const { return in_allocation() && !step_id.empty(); }
};

using GetEnv = std::function<const char*(const char*)>;

/// Reads the variables through get (default: the process's environment).
SlurmEnv read_slurm_env(const GetEnv& get = nullptr);

/// Resolves o.launcher ("auto" becomes "local", "ssh" or "slurm") and sets o.launcher_why, the
/// reason --dry-run prints. Inside a step with several nodes (the per-node mode: `srun -N4
/// mlrun ...`) it fills what the user left unset from Slurm: --nnodes, --node_rank, the
/// rendezvous host (the step's first node, resolved by resolve) and port (step_port), and
/// --rdzv_id. A step with more than one task on a node is refused there unless --nnodes is
/// given (each task would take the node's rank, and its port). Returns the user errors
/// (--launcher slurm outside an allocation, ...).
std::vector<std::string> choose_launcher(
    Options& o, const SlurmEnv& slurm,
    const std::function<std::string(const std::string&)>& resolve);

/// The rendezvous port of a per-node job: 10000 + (job * 64 + step) mod 20000, so that every
/// node of a step computes the same one, two steps of a job (up to 64 at once) differ, and it
/// stays below Linux's ephemeral ports (32768 up).
int step_port(const std::string& job_id, const std::string& step_id);

/// The allocation's nodes as hosts (source "SLURM_JOB_NODELIST"). Their slots come from
/// SLURM_TASKS_PER_NODE when the user asked for tasks (slots_given), else they are 1 and not
/// given: the agent then counts the node's GPUs. Errors name the variable and the item.
HostList allocation_hosts(const SlurmEnv& slurm);

/// What a stop signal's reason adds inside allocation job_id: ", sent by Slurm to job 42 (a
/// scancel, the time limit, a preemption or a failed node)". Slurm's stops reach every task of the
/// job at once.
std::string slurm_signal_note(const std::string& job_id);

/// The per-node mode's answer to a node that fails before it joins (its plan fails there, a
/// program missing on that node; node 0 cannot serve the rendezvous, its port taken): the
/// other nodes, which Slurm does not tell, would wait for it up to the join timeout (600 s).
/// Ends step o.slurm_step with `scancel JOB.STEP` (10 s at most), saying so; SIGTERM is
/// ignored here from then on. Does nothing outside that mode, with one node, or when elastic
/// (the others go on without this node).
void end_step_early(const Options& o);

/// A node name as an address: the resolver's answer, else Slurm's NodeAddr for it (`scontrol show
/// node`; clusters whose names only Slurm knows), else the name itself.
std::string resolve_node(const std::string& name);

}  // namespace mlrun::transport
