// `mlrun rdzv`: a rendezvous server alone, for trainers that bring their own launcher.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <mlrun/rendezvous.hpp>

#include "launcher/flags.h"

namespace mlrun {

/// `mlrun rdzv`'s flags.
struct RdzvOptions {
  static constexpr int kDefaultPort = 29400;
  std::string host = "0.0.0.0";
  int port = kDefaultPort;
  std::string token_file;      ///< --token-file: read the token from it.
  std::string new_token_file;  ///< --new-token-file: write a fresh token to it.
  std::string job_id;
  bool torch_store = false;  ///< --torch-store: also serve PyTorch's TCPStore protocol.
  int max_memory_mib = static_cast<int>(rendezvous::kDefaultMaxMemoryBytes >> 20);
  int max_hold_s = static_cast<int>(
      std::chrono::duration_cast<std::chrono::seconds>(rendezvous::kDefaultMaxHold).count());
  bool help = false;
};

/// The table of `mlrun rdzv`'s flags, writing into o; a bad value appends to errors.
FlagTable rdzv_flag_table(RdzvOptions& o, std::vector<std::string>& errors);

/// The flags after "rdzv"; every user error appended to errors.
RdzvOptions parse_rdzv_args(const std::vector<std::string>& args, std::vector<std::string>& errors);

/// `mlrun rdzv [--host H] [--port P] [--token-file F | --new-token-file F] [--job-id ID]`, args
/// without "rdzv". Serves until SIGINT or SIGTERM, then stops cleanly and returns 0; prints the
/// endpoint on stdout as one line once it listens. The token comes from MLRUN_RDZV_TOKEN or a
/// file, never from argv. Returns 2 for usage errors, 1 when it cannot serve. Never exits.
int rdzv_command(const std::vector<std::string>& args);

/// The text of `mlrun rdzv --help`.
std::string rdzv_usage();

}  // namespace mlrun
