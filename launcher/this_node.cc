#include "launcher/this_node.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "launcher/command.h"
#include "launcher/log_dir.h"
#include "launcher/summary.h"
#include "worker/output.h"
#include "worker/signals.h"

namespace mlrun {
namespace {

namespace fs = std::filesystem;

// Where a run's temporary files go: $XDG_RUNTIME_DIR, /dev/shm, then $TMPDIR or /tmp.
std::string temporary_base_dir() {
  for (const char* candidate : {static_cast<const char*>(std::getenv("XDG_RUNTIME_DIR")),
                                static_cast<const char*>("/dev/shm")}) {
    if (candidate != nullptr && *candidate != '\0' && access(candidate, W_OK | X_OK) == 0) {
      return candidate;
    }
  }
  return fs::temp_directory_path().string();
}

}  // namespace

int run_this_node(const Options& o, const LaunchPlan& plan, NodeJob job, Lifeline& lifeline,
                  int lifeline_fd, const std::function<void(const std::string&)>& gave_up) {
  auto give_up = [&](const std::string& why) {
    // One node of many (the head's own, an agent, whose lines reach the same terminal): which.
    error(gave_up ? fmt::format("node {} ({}): {}", job.node_rank, plan.hostname, why) : why);
    if (gave_up) gave_up(why);
    return 1;
  };
  // A directory for error files, and log files when asked for; a temporary one is removed.
  bool temporary_dir = !plan.log_files;
  std::string run_dir;
  if (plan.log_files) {
    std::string why;
    run_dir = prepare_log_dir(plan.log_dir, plan.job_id, why);
    if (run_dir.empty()) return give_up(why);
    if (plan.log_dir.empty()) fmt::print(stderr, "mlrun: logs in {}\n", run_dir);
  } else {
    // Only error files go here: a flat directory on a memory file system where there is one.
    // (Per-rank directories on a disk mounted with `discard` cost milliseconds each to delete.)
    std::string base = temporary_base_dir();
    std::string tmpl = base + "/mlrun-XXXXXX";
    if (mkdtemp(tmpl.data()) == nullptr) {
      return give_up(
          fmt::format("cannot create a directory in {}: {}", base, std::strerror(errno)));
    }
    run_dir = tmpl;
    lifeline.remove_on_exit(run_dir);
  }
  struct RemoveRunDir {
    bool temporary;
    const std::string& dir;
    ~RemoveRunDir() {
      std::error_code ignored;
      if (temporary) fs::remove_all(dir, ignored);
    }
  } remove_run_dir{temporary_dir, run_dir};
  job.argv = plan.argv;
  job.env = env_template(o, plan);
  job.env.nnodes = job.nnodes;
  job.max_restarts = o.max_restarts;
  job.grace = std::chrono::milliseconds(static_cast<long>(o.grace_period * 1000));
  job.host = plan.hostname;
  job.signals = plan.signals;
  job.numa = plan.numa;
  // An agent's stdin is the head's lifeline, never a worker's: remote ranks read /dev/null.
  job.stdin_to_rank0 = lifeline_fd < 0 && o.stdin_mode != "none";
  NodeHooks hooks;
  DuplicateLogs duplicates;
  hooks.routes = [&](int attempt, const WorkerSpec& w) {
    return routes_for(o, plan, run_dir, attempt, w, duplicates);
  };
  auto error_path = [&](int attempt, int rank) {
    return temporary_dir ? fmt::format("{}/error-{}-{}.json", run_dir, attempt, rank)
                         : error_file(run_dir, attempt, rank);
  };
  hooks.error_file = [&](int attempt, int rank) {
    if (!temporary_dir) make_rank_dir(run_dir, attempt, rank);
    return error_path(attempt, rank);
  };
  hooks.error_message = [&](int attempt, int rank) {
    return read_error_file_message(error_path(attempt, rank));
  };
  int code;
  try {
    code = run_node(job, hooks, lifeline, lifeline_fd);
  } catch (const std::exception& e) {
    code = give_up(e.what());
  }
  if (std::size_t dropped = console_dropped_lines(); dropped > 0) {
    console_write(STDERR_FILENO,
                  fmt::format("mlrun: {} lines of worker output were dropped: the terminal or pipe "
                              "took none for {} ms\n",
                              dropped, console_stall().count()));
  }
  // The loop's signal handlers are gone (Asio restores the default actions): a late SIGUSR1
  // must still not end this process while it waits for its agents.
  keep_forwarded_signals_harmless(plan.signals);
  return code;
}

}  // namespace mlrun
