// One server holds 10,000 authenticated connections at once, and serves every one of them.
// The server runs in a child process: the two ends of 10,000 connections would not fit one
// process's descriptor limit on machines whose hard limit is 20,000.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "mlrun/rendezvous.hpp"

namespace mlrun::rendezvous {
namespace {

using namespace std::chrono_literals;

constexpr int kConnections = 10000;
constexpr const char* kToken = "ten-thousand";

// The child: starts a server, reports its port, serves until the parent closes the pipe.
[[noreturn]] void serve(int port_fd, int hold_fd) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  try {
    Server server = Server::start(ServerOptions{"127.0.0.1", 0, kToken});
    int port = server.port();
    if (write(port_fd, &port, sizeof port) != sizeof port) _exit(3);
    char c;
    while (read(hold_fd, &c, 1) > 0) {
    }
    server.stop();
    _exit(0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "server child: %s\n", e.what());
    _exit(2);
  }
}

TEST(Connections, TenThousandHeldAtOnce) {
  rlimit limit{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &limit), 0);
  if (limit.rlim_max < kConnections + 200) {
    GTEST_SKIP() << "the open-file hard limit is " << limit.rlim_max << ", under "
                 << kConnections + 200;
  }
  limit.rlim_cur = limit.rlim_max;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &limit), 0);

  int port_pipe[2], hold_pipe[2];
  ASSERT_EQ(pipe2(port_pipe, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(hold_pipe, O_CLOEXEC), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(port_pipe[0]);
    close(hold_pipe[1]);
    serve(port_pipe[1], hold_pipe[0]);
  }
  close(port_pipe[1]);
  close(hold_pipe[0]);
  int port = 0;
  ASSERT_EQ(read(port_pipe[0], &port, sizeof port), static_cast<ssize_t>(sizeof port));
  std::string endpoint = "127.0.0.1:" + std::to_string(port);

  auto start = std::chrono::steady_clock::now();
  ClientOptions options;
  options.connect_timeout = 30s;
  options.timeout = 30s;
  std::vector<Client> clients;
  clients.reserve(kConnections);
  // Every connection authenticates (a round trip) and stays open.
  for (int i = 0; i < kConnections; ++i) {
    clients.push_back(Client::connect(endpoint, kToken, options));
  }
  auto connected = std::chrono::steady_clock::now();
  // All 10,000 are served while all are open.
  for (int i = 0; i < kConnections; ++i) {
    ASSERT_EQ(clients[i].add("count", 1), i + 1);
  }
  for (auto& c : clients) c.heartbeat();
  EXPECT_EQ(clients.front().get("count"), std::to_string(kConnections));
  auto done = std::chrono::steady_clock::now();
  std::fprintf(stderr, "%d connections: connected in %.2f s, served in %.2f s\n", kConnections,
               std::chrono::duration<double>(connected - start).count(),
               std::chrono::duration<double>(done - connected).count());
  EXPECT_LT(done - start, 60s);

  clients.clear();
  close(hold_pipe[1]);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "server child status " << status;
}

}  // namespace
}  // namespace mlrun::rendezvous
