#include "launcher/option_env.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

namespace mlrun {
namespace {

// Options read from the environment when they are not on the command line: torchrun's, from
// PET_<OPTION> (its argparse `env` and `check_env` actions; --logs_specs and --numa_binding have
// none), and the grace period from TORCH_ELASTIC_SHUTDOWN_TIMEOUT.
constexpr std::string_view kPetOptions[] = {"--nnodes",
                                            "--nproc_per_node",
                                            "--rdzv_backend",
                                            "--rdzv_endpoint",
                                            "--rdzv_id",
                                            "--rdzv_conf",
                                            "--standalone",
                                            "--max_restarts",
                                            "--monitor_interval",
                                            "--start_method",
                                            "--role",
                                            "--module",
                                            "--no_python",
                                            "--run_path",
                                            "--log_dir",
                                            "--redirects",
                                            "--tee",
                                            "--local_ranks_filter",
                                            "--duplicate_stdout_filters",
                                            "--duplicate_stderr_filters",
                                            "--node_rank",
                                            "--master_addr",
                                            "--master_port",
                                            "--local_addr",
                                            "--signals_to_handle",
                                            "--event_log_handler",
                                            "--grace_period"};

// "--nproc_per_node" -> "PET_NPROC_PER_NODE".
std::string pet_name(std::string_view option) {
  std::string out = "PET_";
  for (char c : option.substr(2))
    out += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

// The variables an option is read from, first found wins: PET_<OPTION>, then any other name
// torchrun reads it under.
std::vector<std::string> env_names(std::string_view option) {
  // mlrun's own option: only torch elastic's variable for the same period.
  if (option == "--grace_period") return {"TORCH_ELASTIC_SHUTDOWN_TIMEOUT"};
  std::vector<std::string> names{pet_name(option)};
  // torchrun's launch_agent and its worker processes read the list here too.
  if (option == "--signals_to_handle") names.emplace_back("TORCHELASTIC_SIGNALS_TO_HANDLE");
  return names;
}

}  // namespace

void apply_environment(const FlagTable& table, Options& o, std::vector<std::string>& errors,
                       const std::vector<const Flag*>& given, const GetEnv& getenv,
                       const std::function<void(const Flag&, const std::string&)>& record) {
  for (auto option : kPetOptions) {
    const Flag* flag = find_flag(table, option);
    if (flag == nullptr || std::find(given.begin(), given.end(), flag) != given.end()) continue;
    for (const auto& var : env_names(option)) {
      const char* raw = getenv(var);
      if (raw == nullptr) continue;
      std::string value = raw;
      std::size_t errors_before = errors.size();
      if (!flag->takes_value()) {
        // torchrun's check_env: bool(int(value)).
        int n;
        if (!parse_integer(value, n)) {
          errors.push_back(fmt::format("{}={}: must be 0 or 1 (for {})", var, value, option));
          break;
        }
        if (n == 0) break;
      }
      flag->apply(flag->names.front(), value);
      record(*flag, value);
      // An error names the variable, not a flag the user never typed.
      for (std::size_t i = errors_before; i < errors.size(); ++i) {
        errors[i] = fmt::format("{} (from {})", errors[i], var);
      }
      o.sources.push_back({std::string(option), value, var});
      break;
    }
  }
}

std::string as_given(const Options& o, std::string_view option, std::string_view value) {
  for (auto src = o.sources.rbegin(); src != o.sources.rend(); ++src) {
    if (src->option != option) continue;
    if (src->origin != "command line") return fmt::format("{}={}", src->origin, src->value);
    return src->value.empty() ? src->option : fmt::format("{}={}", src->option, src->value);
  }
  return value.empty() ? std::string(option) : fmt::format("{}={}", option, value);
}

std::string origin_note(const Options& o, std::string_view option) {
  for (auto src = o.sources.rbegin(); src != o.sources.rend(); ++src) {
    if (src->option == option && src->origin != "command line") {
      return fmt::format(" (from {})", src->origin);
    }
  }
  return "";
}

}  // namespace mlrun
