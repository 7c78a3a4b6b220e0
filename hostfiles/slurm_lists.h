// The two list forms Slurm writes into a job's environment (docs/slurm.md "What mlrun reads"):
// host lists (SLURM_JOB_NODELIST, SLURM_STEP_NODELIST) and run-length counts
// (SLURM_TASKS_PER_NODE, SLURM_JOB_CPUS_PER_NODE). Pure functions: nothing here reads the
// environment or asks Slurm.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace mlrun {

/// Limit on the entries of one run-length list after expansion (one per node).
inline constexpr std::size_t kMaxSlurmCounts = 1 << 16;

/// Expands a Slurm host list: comma-separated items at the top level, each a name with any number
/// of bracket groups ("sn[01-03]", "rack[1-2]-n[01-02]": the groups' product, leftmost slowest;
/// zero padding kept). Names keep their order and duplicates are kept, as `scontrol show
/// hostnames` does. On error returns nothing and sets *error to the item and why:
/// "'sn[03-01]': 03-01 runs backwards".
std::vector<std::string> expand_slurm_hostlist(std::string_view list, std::string* error);

/// Expands Slurm's run-length counts: "2(x3),1" -> 2, 2, 2, 1. On error returns nothing and sets
/// *error to the item and why: "'2(x0)': repeat count must be at least 1".
std::vector<int> expand_slurm_counts(std::string_view text, std::string* error);

}  // namespace mlrun
