// A trainer that brings its own launcher and uses mlrun's rendezvous as a library:
//
//   custom_trainer [N]        (default 4)
//
// The process you start is the coordinator. It embeds a rendezvous Server on 127.0.0.1 (port
// 0: any free one) with a fresh random token, or uses the server named by MLRUN_RDZV_ENDPOINT
// and MLRUN_RDZV_TOKEN when they are set (`mlrun rdzv`). It then starts N-1 copies of itself,
// handing them the endpoint and token in their environment (never argv, which every user of
// the host can read). All N processes connect and join(N): the server hands out ranks 0..N-1
// in join order. Each rank publishes its pid under its rank, adds rank + 1 to a counter and
// meets the others at a barrier; the coordinator checks that every rank 0..N-1 is held by
// exactly one process and the counter reads N(N+1)/2, and exits 0 only if every process did.
#include <signal.h>
#include <spawn.h>
#include <sys/random.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <mlrun/rendezvous.hpp>

extern char** environ;

namespace {

namespace rdzv = mlrun::rendezvous;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr auto kTimeout = 60s;
constexpr const char* kChildVar = "CUSTOM_TRAINER_WORLD_SIZE";

std::string random_token() {
  unsigned char raw[16];
  std::size_t got = 0;
  while (got < sizeof(raw)) {
    ssize_t n = getrandom(raw + got, sizeof(raw) - got, 0);
    if (n > 0) got += static_cast<std::size_t>(n);
  }
  std::string hex;
  for (unsigned char c : raw) {
    static const char kDigits[] = "0123456789abcdef";
    hex += kDigits[c >> 4];
    hex += kDigits[c & 15];
  }
  return hex;
}

// Starts this program again with `overrides` added to (or replacing in) its environment.
pid_t spawn_self(const std::vector<std::string>& overrides) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    bool replaced = false;
    for (const auto& o : overrides) {
      if (kv.compare(0, o.find('=') + 1, o, 0, o.find('=') + 1) == 0) replaced = true;
    }
    if (!replaced) env.push_back(kv);
  }
  env.insert(env.end(), overrides.begin(), overrides.end());
  std::vector<char*> envp;
  for (auto& kv : env) envp.push_back(kv.data());
  envp.push_back(nullptr);
  char self[] = "/proc/self/exe";
  char* argv[] = {self, nullptr};
  pid_t pid = -1;
  int rc = posix_spawn(&pid, self, nullptr, nullptr, argv, envp.data());
  if (rc != 0) {
    std::fprintf(stderr, "custom_trainer: cannot start a copy of itself: error %d\n", rc);
    return -1;
  }
  return pid;
}

// Waits for every child until the deadline, then kills what is left. Returns how many failed.
int reap(std::vector<pid_t>& children, Clock::time_point deadline) {
  int failed = 0;
  while (!children.empty()) {
    for (auto it = children.begin(); it != children.end();) {
      int status = 0;
      pid_t r = waitpid(*it, &status, WNOHANG);
      if (r == 0) {
        ++it;
        continue;
      }
      if (r < 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        std::fprintf(stderr, "custom_trainer: process %d failed (status 0x%x)\n", *it, status);
        ++failed;
      }
      it = children.erase(it);
    }
    if (children.empty()) break;
    if (Clock::now() > deadline) {
      for (pid_t p : children) {
        std::fprintf(stderr, "custom_trainer: process %d did not finish; killing it\n", p);
        kill(p, SIGKILL);
        waitpid(p, nullptr, 0);
        ++failed;
      }
      children.clear();
      break;
    }
    std::this_thread::sleep_for(10ms);
  }
  return failed;
}

// What every process does once connected: join, publish, add, barrier, check.
int train(rdzv::Client& client, int world_size, bool coordinator) {
  // The process that embeds the server is rank 0; the others take the rest in join order.
  int rank = client.join(world_size, coordinator ? 0 : -1, kTimeout);
  if (coordinator && rank != 0) {
    std::fprintf(stderr, "custom_trainer: the embedding process got rank %d, not 0\n", rank);
    return 1;
  }
  client.set("custom_trainer/pid/" + std::to_string(rank), std::to_string(getpid()));
  client.add("custom_trainer/sum", rank + 1);
  client.barrier("custom_trainer/added", world_size, kTimeout);
  std::int64_t sum = std::stoll(client.get("custom_trainer/sum"));
  std::int64_t expected = static_cast<std::int64_t>(world_size) * (world_size + 1) / 2;
  if (sum != expected) {
    std::fprintf(stderr, "custom_trainer: rank %d: sum is %lld, expected %lld\n", rank,
                 static_cast<long long>(sum), static_cast<long long>(expected));
    return 1;
  }
  if (coordinator) {
    // After the barrier every rank's pid is set: each rank 0..N-1 must be a distinct process.
    std::set<std::string> pids;
    for (int r = 0; r < world_size; ++r) {
      auto pid = client.try_get("custom_trainer/pid/" + std::to_string(r));
      if (!pid) {
        std::fprintf(stderr, "custom_trainer: no process holds rank %d\n", r);
        return 1;
      }
      pids.insert(*pid);
    }
    if (static_cast<int>(pids.size()) != world_size) {
      std::fprintf(stderr, "custom_trainer: %zu processes hold %d ranks\n", pids.size(),
                   world_size);
      return 1;
    }
  }
  // Nobody leaves before the coordinator has read every rank's key.
  client.barrier("custom_trainer/checked", world_size, kTimeout);
  std::printf("custom_trainer: pid %d is rank %d of %d\n", getpid(), rank, world_size);
  std::fflush(stdout);
  return 0;
}

// A rank that fails aborts the job, so the others stop at once instead of at their timeouts.
int train_or_abort(rdzv::Client& client, int world_size, bool coordinator) {
  try {
    return train(client, world_size, coordinator);
  } catch (const rdzv::Error& e) {
    std::fprintf(stderr, "custom_trainer: pid %d: %s\n", getpid(), e.what());
    try {
      client.abort(std::string("custom_trainer: pid ") + std::to_string(getpid()) + " failed");
    } catch (const rdzv::Error&) {
      // The connection is gone too; the others notice that themselves.
    }
    return 1;
  }
}

rdzv::ClientOptions client_options() {
  rdzv::ClientOptions o;
  o.connect_timeout = 30s;
  o.timeout = kTimeout;
  if (const char* job = std::getenv("MLRUN_JOB_ID")) o.job_id = job;
  return o;
}

int run(int argc, char** argv) {
  // A copy started by the coordinator: everything it needs is in its environment.
  if (const char* n = std::getenv(kChildVar)) {
    rdzv::Client client = rdzv::Client::connect(std::getenv("MLRUN_RDZV_ENDPOINT"),
                                                std::getenv("MLRUN_RDZV_TOKEN"), client_options());
    return train_or_abort(client, std::atoi(n), false);
  }

  int world_size = argc > 1 ? std::atoi(argv[1]) : 4;
  if (world_size < 1 || world_size > 256) {
    std::fprintf(stderr, "usage: custom_trainer [N]   (1 <= N <= 256 processes)\n");
    return 2;
  }
  // 1. The rendezvous: an external one (`mlrun rdzv`) when the environment names it, else our
  //    own, embedded in this process, with a secret made here.
  std::optional<rdzv::Server> server;
  std::string endpoint, token;
  const char* env_endpoint = std::getenv("MLRUN_RDZV_ENDPOINT");
  const char* env_token = std::getenv("MLRUN_RDZV_TOKEN");
  if (env_endpoint != nullptr && *env_endpoint != '\0' && env_token != nullptr) {
    endpoint = env_endpoint;
    token = env_token;
    std::printf("custom_trainer: using the rendezvous at %s\n", endpoint.c_str());
  } else {
    token = random_token();
    server.emplace(rdzv::Server::start(rdzv::ServerOptions{"127.0.0.1", 0, token}));
    endpoint = server->endpoint();
    std::printf("custom_trainer: serving the rendezvous at %s\n", endpoint.c_str());
  }
  std::fflush(stdout);

  // 2. The other N-1 processes, told where and how to connect through their environment.
  std::vector<pid_t> children;
  int failed = 0;
  for (int i = 1; i < world_size; ++i) {
    pid_t p = spawn_self({"MLRUN_RDZV_ENDPOINT=" + endpoint, "MLRUN_RDZV_TOKEN=" + token,
                          std::string(kChildVar) + "=" + std::to_string(world_size)});
    if (p < 0) {
      ++failed;
      break;
    }
    children.push_back(p);
  }

  // 3. This process trains as one of the ranks; a failure aborts the job so nobody waits.
  int code = 1;
  if (failed == 0) {
    try {
      rdzv::Client client = rdzv::Client::connect(endpoint, token, client_options());
      code = train_or_abort(client, world_size, true);
    } catch (const rdzv::Error& e) {
      std::fprintf(stderr, "custom_trainer: %s\n", e.what());
    }
  }

  // 4. Every process must have succeeded.
  failed += reap(children, Clock::now() + kTimeout + 10s);
  if (code == 0 && failed == 0) {
    std::printf("custom_trainer: %d processes, ranks 0..%d, all succeeded\n", world_size,
                world_size - 1);
    return 0;
  }
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "custom_trainer: %s\n", e.what());
    return 1;
  }
}
