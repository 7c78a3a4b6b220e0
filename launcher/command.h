// From PROGRAM [ARGS...] to the argv every worker runs (docs/design.md §3).
#pragma once

#include <string>
#include <vector>

#include "launcher/options.h"

namespace mlrun {

/// The worker's argv with argv[0] resolved: PROGRAM.py (or --run_path) under `$PYTHON -u`,
/// -m MODULE under `$PYTHON -u -m`, anything else (or --no_python) as is. python is $PYTHON
/// or "python3". Throws SpawnError naming the program when it cannot run.
std::vector<std::string> worker_command(const Options& options, const std::string& python,
                                        const std::string& path_env);

}  // namespace mlrun
