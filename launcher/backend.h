// Which backend a job gets (docs/backends.md): the plan's choice, which `mlrun doctor` explains
// with the same function.
#pragma once

#include <string>

namespace mlrun {

struct BackendChoice {
  std::string name;    ///< nccl, gloo or mpi.
  std::string reason;  ///< One line: why.
};

/// --backend REQUESTED on a host with GPUS visible GPUs, where NCCL was found (its version, or
/// empty when not known) or not.
BackendChoice choose_backend(const std::string& requested, int gpus, bool nccl_found,
                             const std::string& nccl_version = "");

}  // namespace mlrun
