// Which GPUs and CPUs this node's workers get: the GPU indices the node was given
// (--include host:2,3, --num_gpus, an inherited CUDA_VISIBLE_DEVICES) as the workers'
// CUDA_VISIBLE_DEVICES, --virtual_local_rank, and --numa_binding (worker/numa.h).
#pragma once

#include <string>
#include <vector>

#include "launcher/options.h"
#include "worker/numa.h"

namespace mlrun {

struct LaunchPlan;

/// Sets plan.gpus for a node of plan.nproc workers: ids are the GPU indices the node was given
/// (empty: none), each read through the launcher's own CUDA_VISIBLE_DEVICES when that is set (an
/// index counts among the GPUs this node may see, as a scheduler such as Slurm set them). With
/// --virtual_local_rank and no ids, the inherited list or 0..nproc-1. Returns an error message,
/// or empty.
std::string assign_gpus(const Options& o, LaunchPlan& plan, const std::vector<int>& ids);

/// With --numa_binding, sets plan.numa: one binding per local rank, from the machine under
/// $MLRUN_SYSFS_ROOT (default "/", tests point it at a fake tree). Returns an error message
/// that names the host and the cause, or empty.
std::string plan_numa(const Options& o, LaunchPlan& plan);

/// The dry run's line of local rank lr: "GPUs 1,3; CPUs 0-7, memory node 0", or empty.
std::string describe_placement(const LaunchPlan& plan, int lr);

}  // namespace mlrun
