// Processes killed with SIGKILL in the middle of a job: the others see a clear error within a
// bounded time, and the server forgets what the dead process was waiting for.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "mlrun/rendezvous.hpp"
#include "rendezvous/test_util.h"

namespace mlrun::rendezvous {
namespace {

using namespace std::chrono_literals;

constexpr const char* kToken = "fault-token";

ClientOptions quick() {
  ClientOptions o;
  o.connect_timeout = 5s;
  o.timeout = 10s;
  return o;
}

struct Child {
  pid_t pid = -1;
  int to_child = -1;    // parent writes
  int from_child = -1;  // parent reads
};

// Forks a child running body(read_fd, write_fd); call while this process has no other threads.
template <typename Body>
Child fork_child(Body body) {
  int down[2], up[2];
  if (pipe2(down, O_CLOEXEC) != 0 || pipe2(up, O_CLOEXEC) != 0) return {};
  pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    close(down[1]);
    close(up[0]);
    try {
      body(down[0], up[1]);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "child: %s\n", e.what());
      _exit(2);
    }
    _exit(0);
  }
  close(down[0]);
  close(up[1]);
  return {pid, down[1], up[0]};
}

void kill_and_reap(const Child& c) {
  kill(c.pid, SIGKILL);
  int status;
  waitpid(c.pid, &status, 0);
  close(c.to_child);
  close(c.from_child);
}

TEST(Fault, ServerKilledMidJobEveryClientGetsConnectionError) {
  Child server = fork_child([](int in, int out) {
    Server s = Server::start(ServerOptions{"127.0.0.1", 0, kToken});
    int port = s.port();
    if (write(out, &port, sizeof port) != sizeof port) _exit(3);
    char c;
    while (read(in, &c, 1) > 0) {
    }
  });
  ASSERT_GT(server.pid, 0);
  int port = 0;
  ASSERT_EQ(read(server.from_child, &port, sizeof port), static_cast<ssize_t>(sizeof port));
  std::string endpoint = "127.0.0.1:" + std::to_string(port);

  std::atomic<int> connected{0}, errors{0};
  std::atomic<long long> killed_at{0};
  std::vector<std::thread> ranks;
  for (int i = 0; i < 4; ++i) {
    ranks.emplace_back([&, i] {
      Client c = Client::connect(endpoint, kToken, quick());
      connected++;
      try {
        switch (i) {
          case 0:
            c.get("never", 60s);
            break;
          case 1:
            c.wait({"never"}, 60s);
            break;
          case 2:
            c.barrier("never", 10, 60s);
            break;
          default:
            c.join(10, 60s);
            break;
        }
        ADD_FAILURE() << "returned from a wait on a dead server";
      } catch (const ConnectionError& e) {
        auto now = std::chrono::steady_clock::now().time_since_epoch().count();
        EXPECT_LT(std::chrono::steady_clock::duration(now - killed_at.load()), 5s) << e.what();
        EXPECT_NE(std::string(e.what()).find(endpoint), std::string::npos) << e.what();
        errors++;
      }
      // Later calls fail at once, with the same kind of error.
      EXPECT_THROW(c.heartbeat(), ConnectionError);
    });
  }
  while (connected < 4) std::this_thread::sleep_for(1ms);
  killed_at = std::chrono::steady_clock::now().time_since_epoch().count();
  kill_and_reap(server);
  for (auto& t : ranks) t.join();
  EXPECT_EQ(errors.load(), 4);
}

TEST(Fault, ClientKilledMidWaitIsForgottenAndOthersTimeOutNamingTheBarrier) {
  // The child client is forked before the server's thread exists.
  Child client = fork_child([](int in, int out) {
    char endpoint[256] = {};
    ssize_t n = read(in, endpoint, sizeof endpoint - 1);
    if (n <= 0) _exit(3);
    Client c = Client::connect(std::string(endpoint, n), kToken, quick());
    c.barrier("b", 3, 60s);  // killed while held here
  });
  ASSERT_GT(client.pid, 0);
  testing::LoopServer server(ServerOptions{"127.0.0.1", 0, kToken});
  std::string endpoint = server.endpoint();
  ASSERT_EQ(write(client.to_child, endpoint.data(), endpoint.size()),
            static_cast<ssize_t>(endpoint.size()));
  ASSERT_TRUE(server.wait_held(1)) << "the child never reached the barrier";

  Client survivor = Client::connect(endpoint, kToken, quick());
  kill_and_reap(client);
  ASSERT_TRUE(server.wait_connections(1)) << "the server did not notice the death";
  EXPECT_EQ(server.held_requests(), 0u);
  auto start = std::chrono::steady_clock::now();
  try {
    survivor.barrier("b", 3, 300ms);
    FAIL() << "a barrier of 3 passed with one live member";
  } catch (const TimeoutError& e) {
    // The dead child's arrival was withdrawn: only the survivor is counted.
    EXPECT_NE(std::string(e.what()).find("\"b\""), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("1 of 3"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
}

}  // namespace
}  // namespace mlrun::rendezvous
