// The environment of one worker: torchrun's variables with torchrun's meaning (docs/design.md §4),
// mlrun's own, and whatever the user exported, over the launcher's environment.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace mlrun {

/// What every worker of one node and one attempt shares.
struct GroupEnv {
  int node_rank = 0;         ///< GROUP_RANK
  int nnodes = 1;            ///< GROUP_WORLD_SIZE
  int rank_offset = 0;       ///< Global rank of local rank 0.
  int local_world_size = 1;  ///< LOCAL_WORLD_SIZE
  int world_size = 1;        ///< WORLD_SIZE
  std::string master_addr;
  int master_port = 0;
  int restart_count = 0;
  int max_restarts = 0;
  std::string run_id = "none";  ///< TORCHELASTIC_RUN_ID (torchrun's --rdzv_id).
  std::string role = "default";
  std::string job_id;
  std::string backend;
  std::string rdzv_endpoint;  ///< Empty: no rendezvous server for this job.
  std::string rdzv_token;
  /// TORCHELASTIC_USE_AGENT_STORE: MASTER_ADDR:MASTER_PORT is mlrun's server and every worker
  /// is a client of it (--store mlrun); false: worker rank 0 serves PyTorch's own store there.
  bool agent_store = false;
  /// Set for every worker, replacing the launcher's value (mlrun's and -x VAR=VALUE).
  std::vector<std::pair<std::string, std::string>> overrides;
  /// This node's GPUs (CUDA_VISIBLE_DEVICES entries, local rank order); empty: inherited as is.
  std::vector<std::string> gpus;
  /// torchrun's --virtual_local_rank: each worker sees gpus[LOCAL_RANK] alone, as device 0, and
  /// LOCAL_RANK=0 (RANK and the rest unchanged).
  bool virtual_local_rank = false;
  /// Set only where the launcher's environment has no value (backend defaults).
  std::vector<std::pair<std::string, std::string>> defaults;
};

/// A name=value environment with in-place replacement, keeping first-seen order.
class Environment {
 public:
  Environment() = default;
  explicit Environment(const std::vector<std::string>& entries);
  /// The process's own environment.
  static Environment current();
  void set(const std::string& name, const std::string& value);
  void set_default(const std::string& name, const std::string& value);
  const std::string* get(const std::string& name) const;
  const std::vector<std::string>& entries() const { return entries_; }

 private:
  std::size_t find(const std::string& name) const;
  std::vector<std::string> entries_;
};

/// The full environment of local rank local_rank. error_file is TORCHELASTIC_ERROR_FILE.
std::vector<std::string> worker_environment(const Environment& base, const GroupEnv& group,
                                            int local_rank, const std::string& error_file);

}  // namespace mlrun
