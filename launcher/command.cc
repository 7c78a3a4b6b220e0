#include "launcher/command.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "worker/process.h"

namespace mlrun {
namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::vector<std::string> worker_command(const Options& o, const std::string& python,
                                        const std::string& path_env) {
  std::vector<std::string> argv;
  bool use_python = !o.no_python && (o.module || o.run_path || ends_with(o.program, ".py"));
  if (use_python) {
    argv.push_back(resolve_program(python, path_env));
    argv.push_back("-u");
    if (o.module) {
      argv.push_back("-m");
    } else if (access(o.program.c_str(), R_OK) != 0) {
      throw SpawnError(fmt::format("{}: {}", o.program, std::strerror(errno)));
    }
    argv.push_back(o.program);
  } else {
    argv.push_back(resolve_program(o.program, path_env));
  }
  argv.insert(argv.end(), o.program_args.begin(), o.program_args.end());
  return argv;
}

}  // namespace mlrun
