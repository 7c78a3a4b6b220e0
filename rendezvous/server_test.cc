// The server against hostile and broken peers (raw frames), and many ranks as threads.
#include "rendezvous/server.h"

#include <fcntl.h>
#include <signal.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <thread>

#include <fmt/format.h>

#include <gtest/gtest.h>

#include "mlrun/rendezvous.hpp"
#include "rendezvous/test_util.h"

namespace mlrun::rendezvous {
namespace {

using namespace std::chrono_literals;
using proto::Status;
using testing::LoopServer;
using testing::RawPeer;

constexpr const char* kToken = "test-token-0123456789";

ServerOptions options(std::chrono::milliseconds handshake = 10s) {
  ServerOptions o{"127.0.0.1", 0, kToken};
  o.handshake_timeout = handshake;
  o.frame_timeout = 500ms;
  return o;
}

ClientOptions quick() {
  ClientOptions o;
  o.connect_timeout = 5s;
  o.timeout = 10s;
  return o;
}

std::string raw_frame(std::uint8_t op, std::string payload, std::uint8_t version = 1) {
  std::string wire = proto::encode_request(5, proto::Heartbeat{});
  wire[4] = static_cast<char>(version);
  wire[5] = static_cast<char>(op);
  std::uint32_t n = static_cast<std::uint32_t>(payload.size());
  for (int i = 0; i < 4; ++i) wire[12 + i] = static_cast<char>(n >> (8 * i));
  return wire + payload;
}

std::string le32(std::uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

bool any_line_has(const std::vector<std::string>& lines, std::string_view a, std::string_view b) {
  for (const auto& l : lines) {
    if (l.find(a) != std::string::npos && l.find(b) != std::string::npos) return true;
  }
  return false;
}

TEST(Server, WrongTokenIsRefusedLoggedWithPeerAndClosed) {
  LoopServer server(options());
  RawPeer peer(server.port());
  ASSERT_TRUE(peer.ok());
  peer.send(proto::encode_request(1, proto::Hello{"not-the-token", ""}));
  auto reply = peer.read_frame();
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->header.status, Status::kAuthFailed);
  EXPECT_TRUE(peer.closed_by_peer());
  auto lines = server.log_lines();
  ASSERT_TRUE(any_line_has(lines, "wrong token", "127.0.0.1:"));
  for (const auto& l : lines) {
    EXPECT_EQ(l.find("not-the-token"), std::string::npos) << l;
    EXPECT_EQ(l.find(kToken), std::string::npos) << l;
  }
  // The public client sees an AuthError naming the server.
  try {
    Client::connect(server.endpoint(), "wrong", quick());
    FAIL() << "connected with a wrong token";
  } catch (const AuthError& e) {
    EXPECT_NE(std::string(e.what()).find(server.endpoint()), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(Client::connect(server.endpoint(), kToken, quick()).heartbeat());
}

TEST(Server, WrongJobIdIsRefused) {
  ServerOptions o = options();
  o.job_id = "job-a";
  LoopServer server(std::move(o));
  ClientOptions c = quick();
  c.job_id = "job-b";
  EXPECT_THROW(Client::connect(server.endpoint(), kToken, c), AuthError);
  c.job_id = "job-a";
  EXPECT_NO_THROW(Client::connect(server.endpoint(), kToken, c));
}

TEST(Server, FirstRequestMustBeHello) {
  LoopServer server(options());
  RawPeer peer(server.port());
  peer.send(proto::encode_request(1, proto::Set{"k", "v"}));
  auto reply = peer.read_frame();
  ASSERT_TRUE(reply);
  EXPECT_EQ(reply->header.status, Status::kAuthFailed);
  EXPECT_TRUE(peer.closed_by_peer());
  // Nothing was stored.
  Client c = Client::connect(server.endpoint(), kToken, quick());
  EXPECT_FALSE(c.try_get("k"));
}

TEST(Server, SilentAndHalfOpenConnectionsAreClosedAtTheHandshakeDeadline) {
  LoopServer server(options(200ms));
  RawPeer silent(server.port());
  RawPeer half(server.port());
  std::string hello = proto::encode_request(1, proto::Hello{kToken, ""});
  half.send(hello.substr(0, 7));
  // Meanwhile a real client is served at once.
  Client c = Client::connect(server.endpoint(), kToken, quick());
  c.set("k", "v");
  EXPECT_EQ(c.get("k"), "v");
  EXPECT_TRUE(silent.closed_by_peer(3s));
  EXPECT_TRUE(half.closed_by_peer(3s));
  EXPECT_TRUE(any_line_has(server.log_lines(), "no authentication", "127.0.0.1:"));
  EXPECT_EQ(c.add("n", 1), 1);
}

// The server's end of the connection from `client` (a descriptor of this process: the server
// runs on a thread here), found by its addresses; -1 when there is none.
int server_end_of(int client) {
  sockaddr_storage local{}, peer{};
  socklen_t local_len = sizeof local, peer_len = sizeof peer;
  if (getsockname(client, reinterpret_cast<sockaddr*>(&local), &local_len) != 0) return -1;
  if (getpeername(client, reinterpret_cast<sockaddr*>(&peer), &peer_len) != 0) return -1;
  for (int fd = 0; fd < 4096; ++fd) {
    if (fd == client) continue;
    sockaddr_storage l{}, p{};
    socklen_t ll = sizeof l, pl = sizeof p;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&l), &ll) != 0) continue;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&p), &pl) != 0) continue;
    if (ll == peer_len && pl == local_len && std::memcmp(&l, &peer, ll) == 0 &&
        std::memcmp(&p, &local, pl) == 0) {
      return fd;
    }
  }
  return -1;
}

int int_option(int fd, int level, int name) {
  int v = -1;
  socklen_t len = sizeof v;
  return getsockopt(fd, level, name, &v, &len) == 0 ? v : -1;
}

// Every accepted connection has keepalive, the user timeout (a vanished peer is noticed within
// kPeerSilenceBoundS), no Nagle delay, and close-on-exec (workers inherit none of it), whether
// the options come from the listener or are set per connection.
TEST(Server, AcceptedConnectionsHaveKeepaliveUserTimeoutNoDelayAndCloseOnExec) {
  LoopServer server(options());
  RawPeer a(server.port());
  RawPeer b(server.port());
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_TRUE(server.wait_connections(2));
  for (RawPeer* peer : {&a, &b}) {
    int fd = server_end_of(peer->fd());
    ASSERT_GE(fd, 0) << "no server end found for a connection";
    EXPECT_EQ(int_option(fd, IPPROTO_TCP, TCP_NODELAY), 1);
    EXPECT_EQ(int_option(fd, SOL_SOCKET, SO_KEEPALIVE), 1);
    EXPECT_EQ(int_option(fd, IPPROTO_TCP, TCP_KEEPIDLE), 10);
    EXPECT_EQ(int_option(fd, IPPROTO_TCP, TCP_KEEPINTVL), 5);
    EXPECT_EQ(int_option(fd, IPPROTO_TCP, TCP_KEEPCNT), 3);
    EXPECT_EQ(int_option(fd, IPPROTO_TCP, TCP_USER_TIMEOUT), 25000);
    EXPECT_NE(fcntl(fd, F_GETFD) & FD_CLOEXEC, 0);
  }
  // The peer's address is known (it names the peer in the log).
  std::string hello = proto::encode_request(1, proto::Hello{"wrong-token-0123456789", ""});
  a.send(hello);
  EXPECT_TRUE(a.closed_by_peer(3s));
  EXPECT_TRUE(any_line_has(server.log_lines(), "wrong token", "127.0.0.1:"));
}

TEST(Server, AuthenticatedPeerStoppingMidFrameIsClosedAtTheFrameDeadline) {
  LoopServer server(options());
  RawPeer peer(server.port());
  ASSERT_EQ(peer.hello(kToken), Status::kOk);
  std::string set = proto::encode_request(2, proto::Set{"k", "value"});
  peer.send(set.substr(0, set.size() - 2));  // header and part of the payload
  EXPECT_TRUE(peer.closed_by_peer(3s));      // frame_timeout is 500 ms
}

TEST(Server, AuthenticatedPeerStoppingMidHeaderIsClosedAtTheFrameDeadline) {
  LoopServer server(options());
  RawPeer peer(server.port());
  ASSERT_EQ(peer.hello(kToken), Status::kOk);
  peer.send(proto::encode_request(2, proto::Heartbeat{}).substr(0, 5));
  EXPECT_TRUE(peer.closed_by_peer(3s));  // frame_timeout is 500 ms
}

// The server reads into a small buffer: frames split anywhere, two frames in one read (hello and
// the set behind it) and a frame far larger than the buffer all arrive whole.
TEST(Server, FramesSplitAnywhereAndLargeFramesArriveWhole) {
  LoopServer server(options());
  RawPeer peer(server.port());
  std::string big(300'000, 'v');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>('a' + i % 26);
  std::string wire = proto::encode_request(1, proto::Hello{kToken, ""}) +
                     proto::encode_request(2, proto::Set{"big", big});
  // Byte by byte for the first 40, then uneven pieces.
  for (std::size_t i = 0; i < 40; ++i) ASSERT_TRUE(peer.send(wire.substr(i, 1)));
  for (std::size_t at = 40; at < wire.size(); at += 70'001) {
    ASSERT_TRUE(peer.send(wire.substr(at, 70'001)));
    std::this_thread::sleep_for(20ms);
  }
  auto hello = peer.read_frame();
  ASSERT_TRUE(hello);
  EXPECT_EQ(hello->header.status, Status::kOk);
  auto set = peer.read_frame();
  ASSERT_TRUE(set);
  EXPECT_EQ(set->header.status, Status::kOk);
  EXPECT_EQ(set->header.request_id, 2u);
  // Small frames again, then the big value back.
  ASSERT_TRUE(peer.send(proto::encode_request(3, proto::Add{"n", 5})));
  auto add = peer.read_frame();
  ASSERT_TRUE(add);
  ASSERT_TRUE(peer.send(proto::encode_request(4, proto::Get{"big", 1000})));
  auto get = peer.read_frame();
  ASSERT_TRUE(get);
  EXPECT_EQ(get->header.status, Status::kOk);
  EXPECT_NE(get->payload.find(big), std::string::npos);
  // The connection still works with the buffer shrunk back.
  Client c = Client::connect(fmt::format("127.0.0.1:{}", server.port()), kToken, quick());
  EXPECT_EQ(c.add("n", 1), 6);
}

// One bad peer: what it sends, and the status of the reply it should get before the close
// (nullopt: no reply is possible, only the close).
struct BadCase {
  const char* name;
  std::string bytes;
  bool authenticate;
  std::optional<Status> status;
};

std::vector<BadCase> malformed_corpus() {
  std::string hello = proto::encode_request(1, proto::Hello{kToken, ""});
  std::string heartbeat = proto::encode_request(2, proto::Heartbeat{});
  std::string get = proto::encode_request(3, proto::Get{"never", 60000});
  std::string bad_magic = heartbeat;
  bad_magic[0] = 'X';
  return {
      {"http request", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", false, Status::kBadFrame},
      {"zeros", std::string(64, '\0'), false, Status::kBadFrame},
      {"bad magic", bad_magic, true, Status::kBadFrame},
      {"version 2", raw_frame(10, "", 2), false, Status::kUnsupportedVersion},
      {"huge frame before auth", raw_frame(1, "").substr(0, 12) + le32(100000), false,
       Status::kLimitExceeded},
      {"huge frame after auth", raw_frame(3, "").substr(0, 12) + le32(0xfffffff0u), true,
       Status::kLimitExceeded},
      {"unknown op", raw_frame(77, ""), true, Status::kBadFrame},
      {"op zero", raw_frame(0, ""), true, Status::kBadFrame},
      {"reply op as request", raw_frame(0x83, ""), true, Status::kBadFrame},
      {"string past payload", raw_frame(3, le32(1000) + "abc"), true, Status::kBadFrame},
      {"trailing bytes", raw_frame(10, "xyz"), true, Status::kBadFrame},
      {"key over limit",
       raw_frame(
           4, le32(proto::kMaxKeyBytes + 1) + std::string(proto::kMaxKeyBytes + 1, 'k') + le32(0)),
       true, Status::kLimitExceeded},
      {"wait count over limit", raw_frame(7, le32(proto::kMaxKeysPerWait + 1)), true,
       Status::kLimitExceeded},
      {"wait count past payload", raw_frame(7, le32(1000) + le32(0)), true, Status::kBadFrame},
      {"token over limit",
       raw_frame(1, le32(proto::kMaxTokenBytes + 1) + std::string(proto::kMaxTokenBytes + 1, 't') +
                        le32(0)),
       false, Status::kLimitExceeded},
      {"hello twice", hello, true, Status::kBadFrame},
      {"pipelined request", get + heartbeat, true, Status::kBadFrame},
      {"join index out of range",
       raw_frame(2, le32(1) + "g" + le32(2) + le32(5) + le32(1) + le32(10)), true,
       Status::kInvalidArgument},
  };
}

TEST(Server, EveryMalformedFrameGetsAnErrorReplyAndOnlyItsConnectionCloses) {
  LoopServer server(options());
  Client good = Client::connect(server.endpoint(), kToken, quick());
  std::int64_t survived = 0;
  for (const auto& bad : malformed_corpus()) {
    SCOPED_TRACE(bad.name);
    RawPeer peer(server.port());
    ASSERT_TRUE(peer.ok());
    if (bad.authenticate) {
      ASSERT_EQ(peer.hello(kToken), Status::kOk);
    }
    peer.send(bad.bytes);
    auto reply = peer.read_frame(3s);
    if (bad.status) {
      ASSERT_TRUE(reply) << "no error reply";
      // The pipelined case first gets nothing for the held get; the error is the reply.
      EXPECT_EQ(reply->header.status, *bad.status);
      EXPECT_FALSE(reply->payload.empty()) << "error replies carry a message";
    }
    EXPECT_TRUE(peer.closed_by_peer(3s));
    // The good client is unaffected.
    EXPECT_EQ(good.add("survived", 1), ++survived);
  }
  EXPECT_TRUE(any_line_has(server.log_lines(), "bad frame from 127.0.0.1:", "GET / HTTP"));
  EXPECT_TRUE(server.wait_connections(1));
}

TEST(Server, BadFrameLogLineIsShortAndSanitised) {
  LoopServer server(options());
  RawPeer peer(server.port());
  ASSERT_EQ(peer.hello(kToken), Status::kOk);
  std::string payload(2000, '\x01');
  peer.send(raw_frame(99, payload));
  EXPECT_TRUE(peer.closed_by_peer());
  auto lines = server.log_lines();
  ASSERT_TRUE(any_line_has(lines, "unknown op 99", "\\x01"));
  for (const auto& l : lines) {
    EXPECT_LT(l.size(), 400u) << l;
    for (char ch : l) EXPECT_TRUE(ch >= 0x20 && ch < 0x7f) << l;
  }
}

// A job of 16 real ranks completes while garbage, malformed frames, silent, half-open and
// slow connections hit the same server.
TEST(Server, JobCompletesDuringGarbageAndSlowConnections) {
  LoopServer server(options(300ms));
  constexpr int kRanks = 16;
  constexpr int kRounds = 20;
  std::atomic<bool> done{false};
  std::thread attacker([&] {
    auto corpus = malformed_corpus();
    std::vector<std::unique_ptr<RawPeer>> idle;
    for (int i = 0; i < 400 && !done; ++i) {
      const auto& bad = corpus[i % corpus.size()];
      auto peer = std::make_unique<RawPeer>(server.port());
      if (i % 10 == 0) {  // connect and say nothing, or half a frame, and hold it
        if (i % 20 == 0) peer->send(std::string("MLR"));
        idle.push_back(std::move(peer));
        continue;
      }
      if (bad.authenticate) peer->hello(kToken);
      peer->send(bad.bytes);
    }
  });
  std::thread slow([&] {
    // A legitimate client that sends its frames one byte at a time.
    RawPeer peer(server.port());
    std::string hello = proto::encode_request(1, proto::Hello{kToken, ""});
    for (char ch : hello) {
      peer.send(std::string(1, ch));
      std::this_thread::sleep_for(1ms);
    }
    auto reply = peer.read_frame();
    EXPECT_TRUE(reply && reply->header.status == Status::kOk);
  });
  std::vector<std::thread> ranks;
  std::atomic<int> finished{0};
  for (int r = 0; r < kRanks; ++r) {
    ranks.emplace_back([&, r] {
      Client c = Client::connect(server.endpoint(), kToken, quick());
      int rank = c.join(kRanks);
      for (int round = 0; round < kRounds; ++round) {
        std::string key = "r" + std::to_string(round) + "/" + std::to_string(rank);
        c.set(key, std::to_string(rank * round));
        std::string other = "r" + std::to_string(round) + "/" + std::to_string((rank + 1) % kRanks);
        EXPECT_EQ(c.get(other), std::to_string(((rank + 1) % kRanks) * round));
        c.add("total", 1);
        c.barrier("round");
      }
      finished++;
    });
  }
  for (auto& t : ranks) t.join();
  done = true;
  attacker.join();
  slow.join();
  EXPECT_EQ(finished.load(), kRanks);
  Client c = Client::connect(server.endpoint(), kToken, quick());
  EXPECT_EQ(c.get("total"), std::to_string(kRanks * kRounds));
}

TEST(Server, DisconnectDropsTheWaitersOfThatConnection) {
  LoopServer server(options());
  // Connected before the ghost leaves, so that no new connection can reuse its memory and
  // mask a stale arrival.
  Client a = Client::connect(server.endpoint(), kToken, quick());
  Client b = Client::connect(server.endpoint(), kToken, quick());
  {
    // Arrives at a barrier of 2, then goes away.
    RawPeer ghost(server.port());
    ASSERT_EQ(ghost.hello(kToken), Status::kOk);
    ghost.send(proto::encode_request(2, proto::Barrier{"mlrun/barrier/g0/b", 2, 60000}));
    RawPeer getter(server.port());
    ASSERT_EQ(getter.hello(kToken), Status::kOk);
    getter.send(proto::encode_request(2, proto::Get{"k", 60000}));
    ASSERT_TRUE(server.wait_held(2));
  }
  ASSERT_TRUE(server.wait_connections(2));
  EXPECT_EQ(server.held_requests(), 0u);
  // Had the ghost's arrival stayed, the first of these two would pass with it and the second
  // would time out alone.
  std::atomic<int> passed{0};
  auto arrive = [&](Client& c) {
    try {
      c.barrier("b", 2, 2s);
      passed++;
    } catch (const Error& e) {
      ADD_FAILURE() << e.what();
    }
  };
  std::thread ta([&] { arrive(a); });
  std::thread tb([&] { arrive(b); });
  ta.join();
  tb.join();
  EXPECT_EQ(passed.load(), 2);
  a.set("k", "v");  // no reply goes to the departed getter
  EXPECT_EQ(b.get("k"), "v");
}

// A node whose heartbeats stop while its connection stays open (hung: SIGSTOP, D state) aborts
// the job, named, within its timeout; one that closes its connection ends the watch instead.
TEST(Server, NodeHeartbeatsThatStopAbortTheJobNamingTheNode) {
  LoopServer server(options());
  Client waiter = Client::connect(server.endpoint(), kToken, quick());
  {
    Client gone = Client::connect(server.endpoint(), kToken, quick());
    gone.node_heartbeat("node 2 (host3)", 1s);
  }
  ASSERT_TRUE(server.wait_connections(1));
  Client hung = Client::connect(server.endpoint(), kToken, quick());
  hung.node_heartbeat("node 1 (host2)", 300ms);
  hung.node_heartbeat("node 1 (host2)", 300ms);
  auto start = std::chrono::steady_clock::now();
  try {
    waiter.get("never-set", 20s);
    FAIL() << "the get returned";
  } catch (const AbortedError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("node 1 (host2) lost: no heartbeat for"), std::string::npos) << what;
    EXPECT_NE(what.find("heartbeat_timeout 0.3 s"), std::string::npos) << what;
    EXPECT_EQ(what.find("node 2"), std::string::npos) << what;
  }
  // The timeout and the sweep's 250 ms, with room for a loaded machine.
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  EXPECT_THROW(hung.node_heartbeat("node 1 (host2)", 300ms), AbortedError);
}

// A join that waits says so in the server's log at half its timeout (at most 30 s), naming who
// is missing; one bounded below 2 s, or complete at once, says nothing.
TEST(Server, AnIncompleteJoinIsReportedWhileItWaits) {
  LoopServer server(options());
  Client c = Client::connect(server.endpoint(), kToken, quick());
  EXPECT_THROW(c.join(3, 0, 3s), TimeoutError);
  EXPECT_THROW(c.join(2, 0, 1900ms), TimeoutError);
  ElasticJoinOptions eo;
  eo.min_nodes = 2;
  eo.max_nodes = 3;
  eo.member = "host1#1";
  eo.timeout = 2s;
  EXPECT_THROW(c.join_elastic("elastic", eo), TimeoutError);
  auto lines = server.log_lines();
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  EXPECT_TRUE(
      any_line_has(lines, "1 of 3 joined; waiting for index 1, 2: ", " s so far, up to 3 s"))
      << all;
  EXPECT_FALSE(any_line_has(lines, "1 of 2 joined; waiting", "")) << all;
  EXPECT_TRUE(any_line_has(lines,
                           "round 0 of elastic group \"elastic\": 1 joined, at least 2 needed (at "
                           "most 3); waiting for 1 more node: ",
                           " s so far, up to 2 s"))
      << all;
}

// A node that no head watches asks the server to take its heartbeats' connection closing for its
// loss (a SIGKILL closes it like an end): the job is aborted naming it at once. One that takes
// that back first closes without a word, as does one that never asked.
TEST(Server, ANodeWatchedForItsCloseIsLostWhenItClosesUnannounced) {
  LoopServer server(options());
  Client waiter = Client::connect(server.endpoint(), kToken, quick());
  {
    Client before = Client::connect(server.endpoint(), kToken, quick());
    EXPECT_THROW(before.node_watch(true), Error);  // no heartbeat on it yet
  }
  {
    Client ends = Client::connect(server.endpoint(), kToken, quick());
    ends.node_heartbeat("node 2 (host3)", 10s);
    ends.node_watch(true);
    ends.node_watch(false);
  }
  {
    Client plain = Client::connect(server.endpoint(), kToken, quick());
    plain.node_heartbeat("node 3 (host4)", 10s);
  }
  ASSERT_TRUE(server.wait_connections(1));
  EXPECT_NO_THROW(waiter.heartbeat());
  {
    Client killed = Client::connect(server.endpoint(), kToken, quick());
    killed.node_heartbeat("node 1 (host2)", 10s);
    killed.node_watch(true);
  }
  try {
    waiter.get("never-set", 20s);
    FAIL() << "the get returned";
  } catch (const AbortedError& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("node 1 (host2) lost: its connection to the rendezvous closed"),
              std::string::npos)
        << what;
  }
}

TEST(Server, NodeHeartbeatsKeepANodeThatBeats) {
  LoopServer server(options());
  Client waiter = Client::connect(server.endpoint(), kToken, quick());
  Client node = Client::connect(server.endpoint(), kToken, quick());
  for (int i = 0; i < 10; ++i) {
    node.node_heartbeat("node 1 (host2)", 2s);
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_NO_THROW(waiter.heartbeat());
  EXPECT_THROW(node.node_heartbeat("", 2s), Error);
}

// Many ranks as threads, each its own connection: join, add, a published 128-byte ID that
// every rank reads identically, a barrier.
TEST(Server, SixtyFourRanksAsThreads) {
  LoopServer server(options());
  constexpr int kRanks = 64;
  std::vector<std::string> ids(kRanks);
  std::vector<int> ranks(kRanks, -1);
  std::vector<std::thread> ts;
  for (int t = 0; t < kRanks; ++t) {
    ts.emplace_back([&, t] {
      Client c = Client::connect(server.endpoint(), kToken, quick());
      int rank = c.join(kRanks);
      ranks[t] = rank;
      EXPECT_EQ(c.world_size(), kRanks);
      c.add("joined", 1);
      if (rank == 0) {
        std::string id(128, '\0');
        for (int i = 0; i < 128; ++i) id[i] = static_cast<char>((i * 37 + 11) & 0xff);
        c.set("id", id);
      }
      ids[t] = c.get("id");
      c.barrier("after-id");
      EXPECT_EQ(c.get("joined"), std::to_string(kRanks));
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(std::set<int>(ranks.begin(), ranks.end()).size(), static_cast<std::size_t>(kRanks));
  EXPECT_EQ(*std::min_element(ranks.begin(), ranks.end()), 0);
  EXPECT_EQ(*std::max_element(ranks.begin(), ranks.end()), kRanks - 1);
  for (const auto& id : ids) {
    ASSERT_EQ(id.size(), 128u);
    EXPECT_EQ(id, ids[0]);
  }
}

TEST(Server, StopClosesEveryConnectionAndWaitersSeeConnectionError) {
  auto server = std::make_unique<LoopServer>(options());
  std::vector<std::thread> ts;
  std::atomic<int> connection_errors{0};
  std::atomic<int> ready{0};
  for (int i = 0; i < 4; ++i) {
    ts.emplace_back([&] {
      Client c = Client::connect(server->endpoint(), kToken, quick());
      ready++;
      auto start = std::chrono::steady_clock::now();
      try {
        c.get("never", 60s);
      } catch (const ConnectionError& e) {
        EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
        EXPECT_NE(std::string(e.what()).find("never"), std::string::npos) << e.what();
        connection_errors++;
      }
      EXPECT_THROW(c.heartbeat(), ConnectionError);
    });
  }
  while (ready < 4) std::this_thread::yield();
  server->stop();
  for (auto& t : ts) t.join();
  EXPECT_EQ(connection_errors.load(), 4);
}

// The memory cap counts what entries really cost (node, buckets, string blocks), not their
// bytes: 1 MiB holds about 9,000 one-character keys, not 116,000. Past it a set, or a request
// that would be held, is refused with "limit exceeded"; the connection stays usable, and a
// delete makes room again.
TEST(Server, MemoryCapCountsEntriesWithTheirOverhead) {
  ServerOptions o = options();
  o.max_memory = 1u << 20;
  LoopServer server(o);
  Client c = Client::connect(server.endpoint(), kToken, quick());
  std::size_t n = 0;
  std::string refusal;
  for (; n < 200'000; ++n) {
    try {
      c.set(fmt::format("k{}", n), "v");
    } catch (const Error& e) {
      refusal = e.what();
      break;
    }
  }
  EXPECT_NE(refusal.find("limit exceeded"), std::string::npos) << refusal;
  EXPECT_NE(refusal.find("memory cap"), std::string::npos) << refusal;
  // At least 96 bytes an entry; no more than 256.
  EXPECT_LT(n, (1u << 20) / 96) << n << " keys fit";
  EXPECT_GT(n, (1u << 20) / 256) << n << " keys fit";
  std::size_t used = server.on_loop([&] { return server.core().memory_used(); });
  EXPECT_LE(used, o.max_memory);
  EXPECT_GT(used, o.max_memory - 4096);
  // Still served; a blocking request that needs memory is refused at once, not held.
  EXPECT_EQ(c.get("k0"), "v");
  auto start = std::chrono::steady_clock::now();
  try {
    c.get("never set", 30s);
    ADD_FAILURE() << "a held get past the cap was accepted";
  } catch (const TimeoutError& e) {
    ADD_FAILURE() << e.what();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("memory cap"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(c.remove(fmt::format("k{}", i)));
  EXPECT_NO_THROW(c.set("after delete", "v"));
}

// A held request is charged for its key list: a wait naming 2,000 keys of 1,000 bytes (2 MB)
// does not fit a 1 MiB cap and is refused at once; the memory of a held wait is given back when
// it ends (here by its timeout).
TEST(Server, HeldWaitsAreChargedForTheirKeys) {
  ServerOptions o = options();
  o.max_memory = 1u << 20;
  LoopServer server(o);
  Client c = Client::connect(server.endpoint(), kToken, quick());
  std::vector<std::string> keys;
  for (int i = 0; i < 2000; ++i) keys.push_back(fmt::format("{:04}{}", i, std::string(996, 'k')));
  try {
    c.wait(keys, 30s);
    ADD_FAILURE() << "a 2 MB wait was held under a 1 MiB cap";
  } catch (const TimeoutError& e) {
    ADD_FAILURE() << e.what();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("memory cap"), std::string::npos) << e.what();
  }
  EXPECT_EQ(server.held_requests(), 0u);
  keys.resize(200);  // 200 KB: fits
  std::thread waiter([&] { EXPECT_THROW(c.wait(keys, 1s), TimeoutError); });
  ASSERT_TRUE(server.wait_held(1));
  std::size_t held = server.on_loop([&] { return server.core().memory_used(); });
  EXPECT_GT(held, 200u * 1000);
  waiter.join();
  EXPECT_EQ(server.on_loop([&] { return server.core().memory_used(); }), 0u);
}

// A finished join group is freed: 500 groups with 4 KB names leave no group and a few bytes
// each (211 MB for 50,000 before). A late join to a finished group still gets "already
// complete" at once.
TEST(Server, FinishedJoinGroupsAreFreed) {
  LoopServer server(options());
  RawPeer peer(server.port());
  ASSERT_EQ(peer.hello(kToken), Status::kOk);
  auto name = [](int i) { return fmt::format("{:05}{}", i, std::string(4000, 'g')); };
  for (int i = 0; i < 500; ++i) {
    ASSERT_TRUE(peer.send(proto::encode_request(2, proto::Join{name(i), 1, -1, 1, 1000})));
    auto f = peer.read_frame();
    ASSERT_TRUE(f);
    ASSERT_EQ(f->header.status, Status::kOk);
  }
  EXPECT_EQ(server.on_loop([&] { return server.core().open_join_groups(); }), 0u);
  std::size_t used = server.on_loop([&] { return server.core().memory_used(); });
  EXPECT_LT(used, 500u * 100) << used << " bytes for 500 finished groups";
  ASSERT_TRUE(peer.send(proto::encode_request(3, proto::Join{name(7), 1, -1, 1, 1000})));
  auto late = peer.read_frame();
  ASSERT_TRUE(late);
  EXPECT_EQ(late->header.status, Status::kConflict);
  EXPECT_NE(late->payload.find("already complete"), std::string::npos) << late->payload;
  // A group of two: the first member is held (and charged), both are answered, the group goes.
  Client a = Client::connect(server.endpoint(), kToken, quick());
  Client b = Client::connect(server.endpoint(), kToken, quick());
  std::thread first([&] { EXPECT_NO_THROW(a.join(2)); });
  ASSERT_TRUE(server.wait_held(1));
  EXPECT_EQ(server.on_loop([&] { return server.core().open_join_groups(); }), 1u);
  EXPECT_GT(server.on_loop([&] { return server.core().memory_used(); }), used);
  EXPECT_NO_THROW(b.join(2));
  first.join();
  EXPECT_EQ(server.on_loop([&] { return server.core().open_join_groups(); }), 0u);
  EXPECT_THROW(Client::connect(server.endpoint(), kToken, quick()).join(2), Error);
}

// However long a blocking request asks to wait, the server holds it max_hold at most and then
// answers "timeout", saying so; a shorter timeout is the request's own.
TEST(Server, HeldRequestsEndAtTheMaximumHold) {
  ServerOptions o = options();
  o.max_hold = 300ms;
  LoopServer server(o);
  Client c = Client::connect(server.endpoint(), kToken, quick());
  auto start = std::chrono::steady_clock::now();
  try {
    c.wait({"a", "b"}, std::chrono::hours(1));
    ADD_FAILURE() << "the wait returned";
  } catch (const TimeoutError& e) {
    EXPECT_NE(std::string(e.what()).find("kDefaultMaxHold"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("300 ms"), std::string::npos) << e.what();
  }
  EXPECT_GE(std::chrono::steady_clock::now() - start, 250ms);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  try {
    c.get("a", 100ms);
    ADD_FAILURE() << "the get returned";
  } catch (const TimeoutError& e) {
    EXPECT_EQ(std::string(e.what()).find("kDefaultMaxHold"), std::string::npos) << e.what();
  }
  EXPECT_EQ(server.held_requests(), 0u);
}

TEST(Server, OptionsAreChecked) {
  boost::asio::io_context io;
  EXPECT_THROW({ ServerCore s(io, ServerOptions{"127.0.0.1", 0, ""}); }, Error);
  EXPECT_THROW({ ServerCore s(io, ServerOptions{"127.0.0.1", 70000, "t"}); }, Error);
  // A port already in use.
  ServerCore first(io, ServerOptions{"127.0.0.1", 0, "t"});
  EXPECT_THROW(
      {
        ServerCore s(io, ServerOptions{"127.0.0.1", first.port(), "t"});
      },
      ConnectionError);
}

// This process's threads, by id, with the signals each blocks (/proc/self/task/*/status).
std::map<std::string, std::uint64_t> blocked_signals_by_thread() {
  std::map<std::string, std::uint64_t> threads;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream status(task.path() / "status");
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("SigBlk:", 0) == 0) {
        threads[task.path().filename().string()] = std::stoull(line.substr(7), nullptr, 16);
      }
    }
  }
  return threads;
}

// The server's thread blocks every asynchronous signal: a launcher's (or an embedding trainer's)
// handlers run on the thread that handles them, never on one that outlives that thread's loop.
TEST(Server, ItsThreadTakesNoSignal) {
  auto before = blocked_signals_by_thread();
  Server server = Server::start(options());
  // Answered: the thread runs its loop. (A thread starts with every signal blocked and takes its
  // creator's mask before it runs its function: read too early, any thread looks right.)
  Client::connect(server.endpoint(), kToken, quick()).heartbeat();
  auto after = blocked_signals_by_thread();
  int started = 0;
  for (const auto& [tid, blocked] : after) {
    if (before.count(tid) != 0) continue;
    ++started;
    for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGUSR1, SIGUSR2, SIGPIPE}) {
      EXPECT_NE(blocked & (1ULL << (sig - 1)), 0u) << "thread " << tid << " takes signal " << sig;
    }
  }
  // The server's; under ThreadSanitizer also its background thread, which blocks every signal.
  EXPECT_GE(started, 1);
}

}  // namespace
}  // namespace mlrun::rendezvous
