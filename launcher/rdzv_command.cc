#include "launcher/rdzv_command.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <optional>

#include <fmt/format.h>

#include <mlrun/rendezvous.hpp>

#include "launcher/plan.h"
#include "worker/net.h"

namespace mlrun {
namespace {

namespace rdzv = mlrun::rendezvous;

constexpr int kDefaultPort = 29400;
// Ranges of --max-memory (1 TiB) and --max-hold (what a u32 of milliseconds holds).
constexpr int kMaxMemoryMiB = 1 << 20;
constexpr int kMaxHoldS = 4'294'967;

struct RdzvOptions {
  std::string host = "0.0.0.0";
  int port = kDefaultPort;
  std::string token_file;      // --token-file: read the token from it
  std::string new_token_file;  // --new-token-file: write a fresh token to it
  std::string job_id;
  bool torch_store = false;  // --torch-store: also serve PyTorch's TCPStore protocol
  int max_memory_mib = static_cast<int>(rdzv::kDefaultMaxMemoryBytes >> 20);  // --max-memory
  int max_hold_s = static_cast<int>(
      std::chrono::duration_cast<std::chrono::seconds>(rdzv::kDefaultMaxHold).count());
  bool help = false;
};

// Every user error of the command line, collected; flags take `--flag VALUE` or `--flag=VALUE`,
// with dashes or underscores.
RdzvOptions parse(const std::vector<std::string>& args, std::vector<std::string>& errors) {
  RdzvOptions o;
  for (std::size_t i = 0; i < args.size(); ++i) {
    // split_flag: --job-id and --job_id are one flag, as everywhere in mlrun. Messages name
    // the flag as the user spelled it.
    FlagToken token = split_flag(args[i]);
    const std::string& name = token.name;
    const std::string arg = args[i].substr(0, args[i].find('='));
    const std::string& value = token.value;
    const bool has_value = token.has_value && args[i].rfind("--", 0) == 0;
    auto take = [&]() -> std::optional<std::string> {
      if (has_value) return value;
      if (i + 1 < args.size()) return args[++i];
      errors.push_back(fmt::format("{} needs a value", arg));
      return std::nullopt;
    };
    if (name == "-h" || name == "--help") {
      o.help = true;
    } else if (name == "--host") {
      if (auto v = take()) o.host = *v;
    } else if (name == "--port") {
      if (auto v = take(); v && !parse_int(*v, o.port, 0, 65535)) {
        errors.push_back(fmt::format("--port {}: not a port number (0 = any free port)", *v));
      }
    } else if (name == "--token_file") {
      if (auto v = take()) o.token_file = *v;
    } else if (name == "--new_token_file") {
      if (auto v = take()) o.new_token_file = *v;
    } else if (name == "--job_id") {
      if (auto v = take()) o.job_id = *v;
    } else if (name == "--torch_store" && !has_value) {
      o.torch_store = true;
    } else if (name == "--max_memory") {
      if (auto v = take(); v && !parse_int(*v, o.max_memory_mib, 1, kMaxMemoryMiB)) {
        errors.push_back(
            fmt::format("{} {}: not a number of MiB in [1, {}]", arg, *v, kMaxMemoryMiB));
      }
    } else if (name == "--max_hold") {
      if (auto v = take(); v && !parse_int(*v, o.max_hold_s, 1, kMaxHoldS)) {
        errors.push_back(
            fmt::format("{} {}: not a number of seconds in [1, {}]", arg, *v, kMaxHoldS));
      }
    } else if (name == "--token") {
      // Refused on purpose: every user of the host can read a process's argv.
      if (!has_value && i + 1 < args.size()) ++i;
      errors.push_back(
          "--token: a token in argv is visible to every user of this host; put it in "
          "MLRUN_RDZV_TOKEN or in a file named by --token-file");
    } else {
      errors.push_back(fmt::format("unknown argument \"{}\" (mlrun rdzv --help)", args[i]));
    }
  }
  if (!o.token_file.empty() && !o.new_token_file.empty()) {
    errors.push_back("--token-file and --new-token-file exclude each other");
  }
  return o;
}

// The token from its one source; an empty result means an error was recorded.
std::string load_token(const RdzvOptions& o, std::vector<std::string>& errors) {
  if (!o.new_token_file.empty()) {
    // O_EXCL: never overwrite (or follow a planted link to) someone's file; 0600: the secret
    // is readable by its owner only.
    std::string token = random_hex(16);
    int fd = open(o.new_token_file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
      errors.push_back(
          fmt::format("--new-token-file {}: {}", o.new_token_file, std::strerror(errno)));
      return {};
    }
    std::string line = token + "\n";
    bool ok = write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
    ok = close(fd) == 0 && ok;
    if (!ok) {
      errors.push_back(fmt::format("--new-token-file {}: cannot write it", o.new_token_file));
      return {};
    }
    return token;
  }
  if (!o.token_file.empty()) {
    std::string why;
    std::string token = read_token_file(o.token_file, why);
    if (token.empty()) errors.push_back(fmt::format("--token-file {}", why));
    if (!token.empty() && !why.empty()) fmt::print(stderr, "mlrun rdzv: warning: {}\n", why);
    return token;
  }
  const char* env = std::getenv("MLRUN_RDZV_TOKEN");
  if (env != nullptr && *env != '\0') return env;
  errors.push_back(
      "no token: set MLRUN_RDZV_TOKEN, or pass --token-file FILE, or --new-token-file FILE to "
      "make one");
  return {};
}

// What clients connect to: a wildcard address is no destination, so name this host instead.
std::string advertised_endpoint(const RdzvOptions& o, const rdzv::Server& server) {
  if (o.host == "0.0.0.0" || o.host == "::" || o.host.empty()) {
    return fmt::format("{}:{}", host_name(), server.port());
  }
  return server.endpoint();
}

}  // namespace

std::string rdzv_usage() {
  return fmt::format(
      "usage: mlrun rdzv [--host ADDR] [--port PORT] [--token-file FILE | --new-token-file FILE]\n"
      "                  [--job-id ID] [--torch-store] [--max-memory MIB] [--max-hold SECONDS]\n"
      "Serves a rendezvous (ranks, key-value store, barriers, NCCL unique IDs) for trainers that\n"
      "bring their own launcher, until SIGINT or SIGTERM. Prints its endpoint (host:port) on\n"
      "stdout, one line, once it listens; clients connect with that endpoint and the token.\n"
      "  --host ADDR             address to listen on (default 0.0.0.0: every interface)\n"
      "  --port PORT             port (default {}; 0: any free port, printed)\n"
      "  --token-file FILE       read the job's token from FILE\n"
      "  --new-token-file FILE   make a random token and write it to FILE (created, mode 600)\n"
      "  --job-id ID             refuse clients that name another job id\n"
      "  --torch-store           also serve PyTorch's TCPStore (torch 1.13 and 2.x clients) on\n"
      "                          the same port, to loopback and to hosts of authenticated\n"
      "                          clients (docs/torch-store.md)\n"
      "  --max-memory MIB        cap on the memory held for clients: keys and values with their\n"
      "                          overhead, waiting requests, join groups (default {}; past it\n"
      "                          requests are refused, docs/protocol.md)\n"
      "  --max-hold SECONDS      longest a blocking request waits, whatever its timeout\n"
      "                          (default {}, 24 hours)\n"
      "Without a file, the token is MLRUN_RDZV_TOKEN. There is no --token flag: argv is\n"
      "visible to every user of the host. A token needs at least {} characters, {} of them\n"
      "different (--new-token-file makes a random one of 32).\n",
      kDefaultPort, rdzv::kDefaultMaxMemoryBytes >> 20,
      std::chrono::duration_cast<std::chrono::seconds>(rdzv::kDefaultMaxHold).count(),
      kMinTokenChars, kMinTokenDistinctChars);
}

int rdzv_command(const std::vector<std::string>& args) {
  // 1. Options and token: every user error reported together, before anything listens.
  std::vector<std::string> errors;
  RdzvOptions o = parse(args, errors);
  if (o.help) {
    fmt::print("{}", rdzv_usage());
    return 0;
  }
  std::string token = errors.empty() ? load_token(o, errors) : std::string();
  if (!token.empty()) {
    if (auto weak = weak_token(token)) errors.push_back(*weak);
  }
  for (const auto& e : errors) fmt::print(stderr, "mlrun rdzv: error: {}\n", e);
  if (!errors.empty()) return 2;

  // 2. Block SIGINT and SIGTERM before the server's thread starts (it inherits the mask), so
  //    that only sigwait below receives them.
  sigset_t stop_signals, old_mask;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, &old_mask);
  struct RestoreMask {
    sigset_t mask;
    ~RestoreMask() { pthread_sigmask(SIG_SETMASK, &mask, nullptr); }
  } restore{old_mask};

  // 3. Serve; the endpoint goes to stdout for scripts, everything else to stderr.
  std::optional<rdzv::Server> server;
  try {
    rdzv::ServerOptions options{o.host, o.port, token, o.job_id};
    options.torch_store = o.torch_store;
    options.max_memory = static_cast<std::size_t>(o.max_memory_mib) << 20;
    options.max_hold = std::chrono::seconds(o.max_hold_s);
    options.on_abort = [](std::string_view reason) {
      fmt::print(stderr, "mlrun rdzv: the job was aborted: {}\n", reason);
    };
    server.emplace(rdzv::Server::start(std::move(options)));
  } catch (const std::exception& e) {
    fmt::print(stderr, "mlrun rdzv: error: cannot serve on {}:{}: {}\n", o.host, o.port, e.what());
    return 1;
  }
  fmt::print("{}\n", advertised_endpoint(o, *server));
  std::fflush(stdout);
  bool everywhere = o.host == "0.0.0.0" || o.host == "::" || o.host.empty();
  fmt::print(stderr, "mlrun rdzv: serving on {}:{}{}{}; SIGINT or SIGTERM stops it\n", o.host,
             server->port(),
             everywhere ? " (every interface: any host that reaches this one may connect; "
                          "--host 127.0.0.1 for this host only)"
                        : "",
             o.job_id.empty() ? "" : fmt::format(" for job {}", o.job_id));

  // 4. Until a stop signal: then close every connection and return.
  int signal_number = 0;
  while (sigwait(&stop_signals, &signal_number) != 0) {
  }
  server->stop();
  fmt::print(stderr, "mlrun rdzv: stopped by {}\n", signal_number == SIGINT ? "SIGINT" : "SIGTERM");
  return 0;
}

}  // namespace mlrun
