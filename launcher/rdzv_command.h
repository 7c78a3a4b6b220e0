// `mlrun rdzv`: a rendezvous server alone, for trainers that bring their own launcher.
#pragma once

#include <string>
#include <vector>

namespace mlrun {

/// `mlrun rdzv [--host H] [--port P] [--token-file F | --new-token-file F] [--job-id ID]`, args
/// without "rdzv". Serves until SIGINT or SIGTERM, then stops cleanly and returns 0; prints the
/// endpoint on stdout as one line once it listens. The token comes from MLRUN_RDZV_TOKEN or a
/// file, never from argv. Returns 2 for usage errors, 1 when it cannot serve. Never exits.
int rdzv_command(const std::vector<std::string>& args);

/// The text of `mlrun rdzv --help`.
std::string rdzv_usage();

}  // namespace mlrun
