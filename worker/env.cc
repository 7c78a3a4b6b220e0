#include "worker/env.h"

#include <unistd.h>

extern char** environ;

namespace mlrun {

Environment::Environment(const std::vector<std::string>& entries) {
  for (const auto& e : entries) {
    auto eq = e.find('=');
    if (eq == std::string::npos) continue;
    set(e.substr(0, eq), e.substr(eq + 1));
  }
}

Environment Environment::current() {
  std::vector<std::string> entries;
  for (char** e = environ; *e != nullptr; ++e) entries.emplace_back(*e);
  return Environment(entries);
}

std::size_t Environment::find(const std::string& name) const {
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    const std::string& e = entries_[i];
    if (e.size() > name.size() && e[name.size()] == '=' && e.compare(0, name.size(), name) == 0) {
      return i;
    }
  }
  return entries_.size();
}

void Environment::set(const std::string& name, const std::string& value) {
  std::size_t i = find(name);
  if (i == entries_.size()) {
    entries_.push_back(name + "=" + value);
  } else {
    entries_[i] = name + "=" + value;
  }
}

void Environment::set_default(const std::string& name, const std::string& value) {
  if (find(name) == entries_.size()) entries_.push_back(name + "=" + value);
}

const std::string* Environment::get(const std::string& name) const {
  std::size_t i = find(name);
  return i == entries_.size() ? nullptr : &entries_[i];
}

std::vector<std::string> worker_environment(const Environment& base, const GroupEnv& g,
                                            int local_rank, const std::string& error_file) {
  Environment env = base;
  for (const auto& [name, value] : g.defaults) env.set_default(name, value);
  for (const auto& [name, value] : g.overrides) env.set(name, value);
  const int rank = g.rank_offset + local_rank;
  env.set("RANK", std::to_string(rank));
  env.set("LOCAL_RANK", std::to_string(local_rank));
  env.set("WORLD_SIZE", std::to_string(g.world_size));
  env.set("LOCAL_WORLD_SIZE", std::to_string(g.local_world_size));
  env.set("GROUP_RANK", std::to_string(g.node_rank));
  env.set("GROUP_WORLD_SIZE", std::to_string(g.nnodes));
  // One role per job, as with torchrun's default: role ranks are the global ranks.
  env.set("ROLE_RANK", std::to_string(rank));
  env.set("ROLE_WORLD_SIZE", std::to_string(g.world_size));
  env.set("ROLE_NAME", g.role);
  env.set("MASTER_ADDR", g.master_addr);
  env.set("MASTER_PORT", std::to_string(g.master_port));
  env.set("TORCHELASTIC_RESTART_COUNT", std::to_string(g.restart_count));
  env.set("TORCHELASTIC_MAX_RESTARTS", std::to_string(g.max_restarts));
  env.set("TORCHELASTIC_RUN_ID", g.run_id);
  // True: mlrun's rendezvous server is the TCPStore at MASTER_ADDR:MASTER_PORT and no worker
  // binds it (docs/torch-store.md); False: PyTorch's rank 0 binds its own store there.
  env.set("TORCHELASTIC_USE_AGENT_STORE", g.agent_store ? "True" : "False");
  env.set("TORCHELASTIC_ERROR_FILE", error_file);
  if (g.local_world_size > 1) env.set_default("OMP_NUM_THREADS", "1");
  if (g.virtual_local_rank && local_rank < static_cast<int>(g.gpus.size())) {
    env.set("CUDA_VISIBLE_DEVICES", g.gpus[local_rank]);
    env.set("LOCAL_RANK", "0");
  } else if (!g.gpus.empty()) {
    // DeepSpeed's way: the node's GPUs in order, so LOCAL_RANK i uses the i-th of them.
    std::string list;
    for (const auto& gpu : g.gpus) list += (list.empty() ? "" : ",") + gpu;
    env.set("CUDA_VISIBLE_DEVICES", list);
  }
  env.set("MLRUN_JOB_ID", g.job_id);
  if (!g.backend.empty()) env.set("MLRUN_BACKEND", g.backend);
  if (!g.rdzv_endpoint.empty()) {
    env.set("MLRUN_RDZV_ENDPOINT", g.rdzv_endpoint);
    env.set("MLRUN_RDZV_TOKEN", g.rdzv_token);
  }
  return env.entries();
}

}  // namespace mlrun
