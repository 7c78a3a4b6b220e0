// Unit tests of transport/ssh_session.h that need no remote host; the real ones run on the
// namespace cluster (tests/cluster/).
#include "transport/ssh_session.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>

#include <gtest/gtest.h>

namespace mlrun {
namespace {

TEST(RemoteExitTest, StatusFollowsTheShell) {
  RemoteExit e;
  e.exit_code = 3;
  EXPECT_EQ(e.status(), 3);
  EXPECT_FALSE(e.ok());
  e.exit_code = 0;
  EXPECT_TRUE(e.ok());
  e.signal = "TERM";
  e.exit_code = -1;
  EXPECT_EQ(e.status(), 128 + 15);
  e.signal = "KILL";
  EXPECT_EQ(e.status(), 128 + 9);
  RemoteExit lost;
  lost.error = "connection lost";
  EXPECT_EQ(lost.status(), 255);
}

TEST(SshErrorTest, WhatNamesTheHost) {
  SshError e(SshError::Kind::kAuth, "node7", "permission denied");
  EXPECT_STREQ(e.what(), "node7: permission denied");
  EXPECT_EQ(e.host(), "node7");
  EXPECT_EQ(e.kind(), SshError::Kind::kAuth);
}

// A bound but not listening TCP socket: connecting to its port is refused at once.
class RefusedPort {
 public:
  RefusedPort() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
  }
  ~RefusedPort() { close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

TEST(SshSessionTest, RefusedConnectionIsAPromptErrorNamingTheHost) {
  RefusedPort port;
  auto start = std::chrono::steady_clock::now();
  try {
    SshSession::connect({"127.0.0.1", "", port.port()}, {std::chrono::milliseconds(5000)});
    FAIL() << "connected to a port nobody listens on";
  } catch (const SshError& e) {
    EXPECT_EQ(e.kind(), SshError::Kind::kConnect) << e.what();
    EXPECT_EQ(e.host(), "127.0.0.1");
    EXPECT_NE(std::string(e.what()).find("127.0.0.1"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(2));
}

TEST(SshSessionTest, ConnectAllReportsEveryHost) {
  RefusedPort a, b;
  auto results = connect_all({{"127.0.0.1", "", a.port()}, {"127.0.0.1", "", b.port()}});
  ASSERT_EQ(results.size(), 2u);
  for (auto& r : results) {
    ASSERT_TRUE(std::holds_alternative<SshError>(r));
  }
}

}  // namespace
}  // namespace mlrun
