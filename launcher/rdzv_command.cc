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

#include "launcher/flags.h"
#include "launcher/options.h"
#include "launcher/plan.h"
#include "worker/net.h"

namespace mlrun {
namespace {

namespace rdzv = mlrun::rendezvous;

// Ranges of --max-memory (1 TiB) and --max-hold (what a u32 of milliseconds holds).
constexpr int kMaxMemoryMiB = 1 << 20;
constexpr int kMaxHoldS = 4'294'967;

const FlagSyntax kRdzvSyntax = {
    [](const std::string& arg) {
      return fmt::format("unknown argument \"{}\" (mlrun rdzv --help)", arg);
    },
    [](const std::string& written, const Flag&) {
      return fmt::format("{} needs a value", written);
    },
    [](const std::string& written, const Flag&) {
      return fmt::format("{} takes no value", written);
    },
    false,
    true,
};

}  // namespace

FlagTable rdzv_flag_table(RdzvOptions& o, std::vector<std::string>& errors) {
  auto text = [](std::string& field) {
    return [&field](const std::string&, const std::string& v) { field = v; };
  };
  auto number = [&errors](int& field, int lo, int hi, std::string why) {
    return [&field, &errors, lo, hi, why](const std::string& flag, const std::string& v) {
      if (!parse_integer(v, field, lo, hi))
        errors.push_back(fmt::format("{} {}: {}", flag, v, why));
    };
  };
  return {
      {{"--host"}, "ADDR", "address to listen on (default 0.0.0.0: every interface)", text(o.host)},
      {{"--port"},
       "PORT",
       fmt::format("port (default {}; 0: any free port, printed)", RdzvOptions::kDefaultPort),
       number(o.port, 0, 65535, "not a port number (0 = any free port)")},
      {{"--token-file"}, "FILE", "read the job's token from FILE", text(o.token_file)},
      {{"--new-token-file"},
       "FILE",
       "make a random token and write it to FILE (created, mode 600)",
       text(o.new_token_file)},
      {{"--job-id"}, "ID", "refuse clients that name another job id", text(o.job_id)},
      {{"--torch-store"},
       "",
       "also serve PyTorch's TCPStore (torch 1.13 and 2.x clients) on the same port, to "
       "loopback and to hosts of authenticated clients (docs/torch-store.md)",
       [&o](const std::string&, const std::string&) { o.torch_store = true; }},
      {{"--max-memory"},
       "MIB",
       fmt::format("cap on the memory held for clients: keys and values with their overhead, "
                   "waiting requests, join groups (default {}; past it requests are refused, "
                   "docs/protocol.md)",
                   rdzv::kDefaultMaxMemoryBytes >> 20),
       number(o.max_memory_mib, 1, kMaxMemoryMiB,
              fmt::format("not a number of MiB in [1, {}]", kMaxMemoryMiB))},
      {{"--max-hold"},
       "SECONDS",
       fmt::format("longest a blocking request waits, whatever its timeout (default {}, 24 hours)",
                   o.max_hold_s),
       number(o.max_hold_s, 1, kMaxHoldS,
              fmt::format("not a number of seconds in [1, {}]", kMaxHoldS))},
      {{"--help", "-h"},
       "",
       "this text",
       [&o](const std::string&, const std::string&) { o.help = true; }},
      // Refused on purpose: every user of the host can read a process's argv.
      {.names = {"--token"},
       .value = "TOKEN",
       .apply =
           [&errors](const std::string&, const std::string&) {
             errors.push_back(
                 "--token: a token in argv is visible to every user of this host; put it in "
                 "MLRUN_RDZV_TOKEN or in a file named by --token-file");
           },
       .hidden = true,
       .value_optional = true},
  };
}

RdzvOptions parse_rdzv_args(const std::vector<std::string>& args,
                            std::vector<std::string>& errors) {
  RdzvOptions o;
  parse_flags(rdzv_flag_table(o, errors), args, kRdzvSyntax, errors);
  if (!o.token_file.empty() && !o.new_token_file.empty()) {
    errors.push_back("--token-file and --new-token-file exclude each other");
  }
  return o;
}

namespace {

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
  RdzvOptions o;
  std::vector<std::string> errors;
  return fmt::format(
      "usage: mlrun rdzv [--host ADDR] [--port PORT] [--token-file FILE | --new-token-file FILE]\n"
      "                  [--job-id ID] [--torch-store] [--max-memory MIB] [--max-hold SECONDS]\n"
      "Serves a rendezvous (ranks, key-value store, barriers, NCCL unique IDs) for trainers that\n"
      "bring their own launcher, until SIGINT or SIGTERM. Prints its endpoint (host:port) on\n"
      "stdout, one line, once it listens; clients connect with that endpoint and the token.\n"
      "{}"
      "Without a file, the token is MLRUN_RDZV_TOKEN. There is no --token flag: argv is\n"
      "visible to every user of the host. A token needs at least {} characters, {} of them\n"
      "different (--new-token-file makes a random one of 32).\n",
      flags_usage(rdzv_flag_table(o, errors)), kMinTokenChars, kMinTokenDistinctChars);
}

int rdzv_command(const std::vector<std::string>& args) {
  // 1. Options and token: every user error reported together, before anything listens.
  std::vector<std::string> errors;
  RdzvOptions o = parse_rdzv_args(args, errors);
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
