// mlrun's top level: subcommands, and the launch of a job as a sequence of named steps.
#pragma once

#include <string>
#include <vector>

namespace mlrun {

/// Everything `mlrun ARGS...` does; returns the process's exit code. Never exits by itself.
int mlrun_main(const std::vector<std::string>& args);

}  // namespace mlrun
