// The options torchrun reads from the environment (PET_NNODES, ...: Kubeflow's PyTorchJob sets
// them), for `mlrun`'s parser (launcher/options.cc).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "launcher/flags.h"
#include "launcher/options.h"

namespace mlrun {

/// Applies every torchrun option not `given` on the command line from its variable, as torchrun
/// does; `record` is told each flag applied. An error names the variable. Each value applied is
/// listed in o.sources with the variable as its origin.
void apply_environment(const FlagTable& table, Options& o, std::vector<std::string>& errors,
                       const std::vector<const Flag*>& given, const GetEnv& getenv,
                       const std::function<void(const Flag&, const std::string&)>& record);

}  // namespace mlrun
