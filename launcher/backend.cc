#include "launcher/backend.h"

#include <fmt/format.h>

namespace mlrun {

BackendChoice choose_backend(const std::string& requested, int gpus, bool nccl_found,
                             const std::string& nccl_version) {
  if (requested != "auto") return {requested, fmt::format("--backend {} was given", requested)};
  if (gpus > 0 && nccl_found) {
    return {"nccl", fmt::format("{} NVIDIA GPU{} and NCCL{} found", gpus, gpus == 1 ? "" : "s",
                                nccl_version.empty() ? "" : " " + nccl_version)};
  }
  if (gpus > 0) return {"gloo", fmt::format("{} NVIDIA GPU(s) but no NCCL (libnccl.so.2)", gpus)};
  if (nccl_found) return {"gloo", "no NVIDIA GPU (NCCL is installed but needs one)"};
  return {"gloo", "no NVIDIA GPU and no NCCL"};
}

}  // namespace mlrun
