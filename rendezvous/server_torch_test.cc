// The server's TCPStore side against raw sockets: recorded sessions of real torch clients
// replayed byte for byte, malformed input, waiting requests, generations and the allow list.
#include <ifaddrs.h>
#include <net/if.h>
#include <sys/resource.h>

#include <memory>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include <gtest/gtest.h>

#include "mlrun/rendezvous.hpp"
#include "rendezvous/server.h"
#include "rendezvous/test_util.h"
#include "rendezvous/torch_store.h"
#include "rendezvous/torch_store_test_util.h"

namespace mlrun::rendezvous {
namespace {

using namespace std::chrono_literals;
using testing::LoopServer;
using testing::RawPeer;
using torch::Dialect;
using TOp = torch::Op;

constexpr const char* kTorchToken = "torch-test-token";

ServerOptions torch_options(std::chrono::milliseconds handshake = 10s) {
  ServerOptions o{"127.0.0.1", 0, kTorchToken};
  o.handshake_timeout = handshake;
  o.frame_timeout = 500ms;
  o.torch_store = true;
  return o;
}

std::string req(Dialect d, TOp op, std::vector<std::string> keys = {},
                std::vector<std::string> values = {}, std::int64_t delta = 0) {
  torch::Request r;
  r.op = op;
  r.keys = std::move(keys);
  r.values = std::move(values);
  r.delta = delta;
  return torch::encode(d, r);
}

std::string validate() {
  return std::string("\x00\xce\xf7\x85\x3c", 5);
}

std::string bytes_reply(std::string_view v) {
  std::string out;
  torch::append_bytes(out, v);
  return out;
}

std::string i64_reply(std::int64_t v) {
  std::string out;
  torch::append_i64(out, v);
  return out;
}

bool any_line_has(const std::vector<std::string>& lines, std::string_view a, std::string_view b) {
  for (const auto& l : lines) {
    if (l.find(a) != std::string::npos && l.find(b) != std::string::npos) return true;
  }
  return false;
}

// The bytes a real client sent go to mlrun's server in the same pieces; its answers must be
// the bytes PyTorch's own server answered.
void replay(const char* file) {
  LoopServer server(torch_options());
  RawPeer peer(server.port());
  ASSERT_TRUE(peer.ok());
  auto chunks = torch::testing::load_session(file);
  ASSERT_FALSE(chunks.empty()) << file;
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    if (chunks[i].from_client) {
      ASSERT_TRUE(peer.send(chunks[i].bytes));
      continue;
    }
    auto got = peer.read_bytes(chunks[i].bytes.size());
    ASSERT_TRUE(got) << file << ": no reply for chunk " << i;
    ASSERT_EQ(*got, chunks[i].bytes) << file << ": chunk " << i;
  }
}

TEST(ServerTorch, RecordedTorch113SessionGetsPyTorchsReplies) {
  replay("torch113_one_client.txt");
}

TEST(ServerTorch, RecordedTorch26SessionGetsPyTorchsReplies) {
  replay("torch26_one_client.txt");
}

TEST(ServerTorch, MalformedInputClosesOnlyThatConnection) {
  LoopServer server(torch_options());
  RawPeer good(server.port());
  good.send(req(Dialect::kTorch113, TOp::kSet, {"/k"}, {"v"}) +
            req(Dialect::kTorch113, TOp::kGet, {"/k"}));
  ASSERT_EQ(good.read_bytes(9), bytes_reply("v"));
  const std::string max = std::string(8, '\xff');
  struct Case {
    const char* name;
    std::string bytes;
    const char* logged;
  };
  const Case cases[] = {
      {"1.13 GET with a 2^64-1 key length", std::string("\x02", 1) + max, "kMaxKeyBytes"},
      {"2.x SET with a 2^64-1 value length",
       validate() + std::string("\x01\x01\0\0\0\0\0\0\0k", 10) + max, "kMaxValueBytes"},
      {"2.x WAIT of 2^64-1 keys", validate() + std::string("\x06", 1) + max, "kMaxKeys"},
      {"VALIDATE twice", validate() + validate(), "VALIDATE sent twice"},
      {"1.13 unknown opcode after a request", req(Dialect::kTorch113, TOp::kGetNumKeys) + "\x09",
       "unknown opcode"},
      {"2.x unknown opcode", validate() + "\x0e", "unknown opcode"},
      {"VALIDATE with a bad magic", std::string("\x00\xce\xf7\x85\x3d\0\0\0\0", 9), "kMaxKeyBytes"},
      {"2.x PING before VALIDATE", std::string("\x0d\x01\x02\x03\x04", 5), "neither"},
      {"1.13 WATCH_KEY", req(Dialect::kTorch113, TOp::kWatchKey, {"/k"}), "WATCH_KEY"},
      {"ADD on a value that is not a number", req(Dialect::kTorch113, TOp::kAdd, {"/k"}, {}, 1),
       "not a decimal integer"},
  };
  for (const auto& c : cases) {
    RawPeer bad(server.port());
    bad.send(c.bytes);
    EXPECT_TRUE(bad.closed_by_peer(3s)) << c.name;
    EXPECT_TRUE(any_line_has(server.log_lines(), c.logged, "127.0.0.1:")) << c.name;
  }
  // A request cut short and left there is cut at the frame deadline.
  RawPeer stalled(server.port());
  stalled.send(std::string("\x02\x05\0\0", 4));
  EXPECT_TRUE(stalled.closed_by_peer(3s));
  // The good connection was served throughout.
  good.send(req(Dialect::kTorch113, TOp::kGet, {"/k"}));
  EXPECT_EQ(good.read_bytes(9), bytes_reply("v"));
}

TEST(ServerTorch, WaitAndGetBlockUntilTheKeyIsSetAndCancelWaitEndsAWait) {
  LoopServer server(torch_options());
  RawPeer waiter(server.port()), getter(server.port()), setter(server.port());
  waiter.send(validate() + req(Dialect::kTorch2, TOp::kWait, {"/a", "/b"}));
  getter.send(req(Dialect::kTorch113, TOp::kGet, {"/b"}));
  setter.send(req(Dialect::kTorch113, TOp::kSet, {"/a"}, {"1"}));
  EXPECT_FALSE(waiter.read_bytes(1, 200ms)) << "answered before /b was set";
  EXPECT_FALSE(getter.read_bytes(1, 10ms));
  setter.send(req(Dialect::kTorch113, TOp::kSet, {"/b"}, {"two"}));
  EXPECT_EQ(waiter.read_bytes(1), std::string(1, '\0'));
  EXPECT_EQ(getter.read_bytes(11), bytes_reply("two"));
  // torch 2.x gives up on a wait with CANCEL_WAIT: answered at once, and the wait is gone.
  waiter.send(req(Dialect::kTorch2, TOp::kWait, {"/never"}));
  EXPECT_FALSE(waiter.read_bytes(1, 100ms));
  waiter.send(req(Dialect::kTorch2, TOp::kCancelWait));
  EXPECT_EQ(waiter.read_bytes(1), std::string(1, '\x01'));
  setter.send(req(Dialect::kTorch113, TOp::kSet, {"/never"}, {"x"}) +
              req(Dialect::kTorch113, TOp::kGetNumKeys));
  EXPECT_EQ(setter.read_bytes(8), i64_reply(3));
  waiter.send(req(Dialect::kTorch2, TOp::kGetNumKeys));
  EXPECT_EQ(waiter.read_bytes(8), i64_reply(3));
  // MULTI_GET waits for all its keys, then answers each value in order.
  waiter.send(req(Dialect::kTorch2, TOp::kMultiGet, {"/a", "/c"}));
  EXPECT_FALSE(waiter.read_bytes(1, 100ms));
  setter.send(req(Dialect::kTorch113, TOp::kSet, {"/c"}, {"3"}));
  EXPECT_EQ(waiter.read_bytes(18), bytes_reply("1") + bytes_reply("3"));
}

TEST(ServerTorch, SilentCallbackConnectionOutlivesTheHandshakeDeadline) {
  LoopServer server(torch_options(200ms));
  RawPeer callback(server.port());  // torch 1.13's second connection: never sends a byte
  RawPeer half_hello(server.port());
  half_hello.send("MLRZ");
  EXPECT_TRUE(half_hello.closed_by_peer(3s));
  EXPECT_FALSE(callback.closed_by_peer(600ms));
  // It is still a TCPStore client when it speaks.
  callback.send(req(Dialect::kTorch113, TOp::kAdd, {"init/"}, {}, 1));
  EXPECT_EQ(callback.read_bytes(8), i64_reply(1));
}

TEST(ServerTorch, ANewGenerationEmptiesTheKeysAndClosesEarlierClients) {
  LoopServer server(torch_options());
  RawPeer old(server.port()), silent(server.port());
  old.send(req(Dialect::kTorch113, TOp::kSet, {"/worker/attempt_0/x"}, {"stale"}));
  old.send(req(Dialect::kTorch113, TOp::kGetNumKeys));
  ASSERT_EQ(old.read_bytes(8), i64_reply(1));
  Client c = Client::connect(server.endpoint(), kTorchToken);
  c.set(std::string(kTorchStoreGenerationKey), "1");
  EXPECT_TRUE(old.closed_by_peer(3s));
  RawPeer fresh(server.port());
  fresh.send(validate() + req(Dialect::kTorch2, TOp::kCheck, {"/worker/attempt_0/x"}) +
             req(Dialect::kTorch2, TOp::kGetNumKeys));
  EXPECT_EQ(fresh.read_bytes(9), std::string(1, '\x01') + i64_reply(0));
  // mlrun's own keys are not TCPStore keys.
  c.set("shared?", "no");
  fresh.send(req(Dialect::kTorch2, TOp::kCheck, {"shared?"}));
  EXPECT_EQ(fresh.read_bytes(1), std::string(1, '\x01'));
}

// TCPStore keys and waiting requests are charged to the server's one memory cap, with mlrun's own
// keys: past it the TCPStore request closes its connection (no error reply in that protocol),
// naming the cap in the log; a new generation gives the old keys' memory back.
TEST(ServerTorch, KeysAndWaitsCountAgainstTheServersOneCap) {
  ServerOptions o = torch_options();
  o.max_memory = 512u << 10;
  LoopServer server(o);
  auto used = [&] { return server.on_loop([&] { return server.core().memory_used(); }); };
  RawPeer torch_peer(server.port());
  torch_peer.send(req(Dialect::kTorch113, TOp::kSet, {"/a"}, {std::string(200'000, 'a')}) +
                  req(Dialect::kTorch113, TOp::kGetNumKeys));
  ASSERT_EQ(torch_peer.read_bytes(8), i64_reply(1));
  EXPECT_GT(used(), 200'000u);
  Client c = Client::connect(server.endpoint(), kTorchToken);
  c.set("mine", std::string(200'000, 'm'));
  // 400 KB held; 200 KB more does not fit 512 KiB, whichever protocol asks.
  torch_peer.send(req(Dialect::kTorch113, TOp::kSet, {"/b"}, {std::string(200'000, 'b')}));
  EXPECT_TRUE(torch_peer.closed_by_peer(3s));
  EXPECT_TRUE(any_line_has(server.log_lines(), "memory cap", "/b"));
  EXPECT_THROW(c.set("mine too", std::string(200'000, 'm')), Error);
  // A WAIT naming 100 KB of keys is charged while it waits, and refused past the cap.
  RawPeer waiter(server.port());
  std::vector<std::string> keys;
  for (int i = 0; i < 100; ++i) keys.push_back(fmt::format("/{:03}{}", i, std::string(996, 'w')));
  std::size_t before = used();
  waiter.send(req(Dialect::kTorch113, TOp::kWait, keys));
  EXPECT_FALSE(waiter.read_bytes(1, 200ms));
  // Charged once the whole request is read, which a slow machine under TSan can take a while to
  // do; the request is cut if not read within frame_timeout (500 ms here), so a wait for the
  // charge longer than that does not hide a slow reader.
  for (auto until = std::chrono::steady_clock::now() + 3s;
       used() <= before + 100'000 && std::chrono::steady_clock::now() < until;) {
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_GT(used(), before + 100'000);
  EXPECT_FALSE(any_line_has(server.log_lines(), "incomplete TCPStore request", ""));
  waiter.close();
  ASSERT_TRUE(server.wait_connections(1));
  EXPECT_EQ(used(), before);
  for (int i = 0; i < 100; ++i)
    keys.push_back(fmt::format("/{:03}{}", i + 100, std::string(996, 'w')));
  RawPeer big_waiter(server.port());
  big_waiter.send(req(Dialect::kTorch113, TOp::kWait, keys));
  EXPECT_TRUE(big_waiter.closed_by_peer(3s));
  // A new generation frees the TCPStore keys.
  c.set(std::string(kTorchStoreGenerationKey), "1");
  EXPECT_LT(used(), before - 150'000);
}

// A TCPStore GET or WAIT is held max_hold at most, like mlrun's own requests; the protocol has no
// timeout reply, so the connection is closed, the log naming the maximum.
TEST(ServerTorch, WaitsEndAtTheMaximumHold) {
  ServerOptions o = torch_options();
  o.max_hold = 300ms;
  LoopServer server(o);
  RawPeer waiter(server.port());
  auto start = std::chrono::steady_clock::now();
  waiter.send(req(Dialect::kTorch113, TOp::kGet, {"/never"}));
  EXPECT_TRUE(waiter.closed_by_peer(10s));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 250ms);
  EXPECT_TRUE(any_line_has(server.log_lines(), "maximum hold", "300 ms"));
  EXPECT_EQ(server.on_loop([&] { return server.core().memory_used(); }), 0u);
  // A wait answered in time is not cut.
  RawPeer quick_waiter(server.port()), setter(server.port());
  quick_waiter.send(req(Dialect::kTorch113, TOp::kWait, {"/soon"}));
  setter.send(req(Dialect::kTorch113, TOp::kSet, {"/soon"}, {"1"}));
  EXPECT_EQ(quick_waiter.read_bytes(1), std::string(1, '\0'));
  EXPECT_FALSE(quick_waiter.closed_by_peer(600ms));
}

// An IPv4 address of this host that is not loopback, or "" where there is none.
std::string non_loopback_address() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return {};
  std::string found;
  for (ifaddrs* i = list; i && found.empty(); i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || (i->ifa_flags & IFF_LOOPBACK)) {
      continue;
    }
    char text[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr, text, sizeof text);
    found = text;
  }
  freeifaddrs(list);
  return found;
}

TEST(ServerTorch, AddressesOutsideTheJobAreRefusedUntilTheyAuthenticate) {
  std::string address = non_loopback_address();
  if (address.empty()) GTEST_SKIP() << "this host has no non-loopback IPv4 address";
  ServerOptions o = torch_options();
  o.host = "0.0.0.0";
  LoopServer server(o);
  RawPeer stranger(server.port(), address.c_str());
  stranger.send(req(Dialect::kTorch113, TOp::kGetNumKeys));
  EXPECT_TRUE(stranger.closed_by_peer(3s));
  EXPECT_TRUE(any_line_has(server.log_lines(), "refused torch 1.13", address));
  EXPECT_EQ(server.on_loop([&] { return server.core().torch_refused(); }), 1u);
  // A node of the job authenticates with the token from that address: its workers may connect.
  Client node = Client::connect(fmt::format("{}:{}", address, server.port()), kTorchToken);
  RawPeer worker(server.port(), address.c_str());
  worker.send(req(Dialect::kTorch113, TOp::kGetNumKeys));
  EXPECT_EQ(worker.read_bytes(8), i64_reply(0));
}

// torch 1.13 ranks' silent second connections from the job's nodes are not evicted when there
// are more of them than kMaxPendingConnections (a job of more ranks than that): they are capped
// apart, at half the descriptors, and after strangers.
TEST(ServerTorch, SilentConnectionsOfTheJobsNodesAreNotEvictedPastTheStrangersCap) {
  std::string address = non_loopback_address();
  if (address.empty()) GTEST_SKIP() << "this host has no non-loopback IPv4 address";
  const std::size_t n = kMaxPendingConnections + 64;
  rlimit limit{};
  getrlimit(RLIMIT_NOFILE, &limit);
  if (limit.rlim_max != RLIM_INFINITY && limit.rlim_max < 2 * (n + 200)) {
    GTEST_SKIP() << "the open-file limit (" << limit.rlim_max << ") is below " << 2 * (n + 200);
  }
  ServerOptions o = torch_options(60s);
  o.host = "0.0.0.0";
  LoopServer server(o);
  // A node of the job authenticates from that address (its agent does, before the workers).
  Client node = Client::connect(fmt::format("{}:{}", address, server.port()), kTorchToken);
  std::vector<std::unique_ptr<RawPeer>> silent;
  for (std::size_t i = 0; i < n; ++i) {
    silent.push_back(std::make_unique<RawPeer>(server.port(), address.c_str()));
    ASSERT_TRUE(silent.back()->ok()) << "connection " << i;
  }
  ASSERT_TRUE(server.wait_connections(n + 1, 30s)) << "some were evicted";
  std::size_t closed = 0;
  for (auto& peer : silent) closed += peer->closed_by_peer(0ms) ? 1 : 0;
  EXPECT_EQ(closed, 0u);
  EXPECT_FALSE(any_line_has(server.log_lines(), "evicted", address));
}

TEST(ServerTorch, OffByDefault) {
  ServerOptions o{"127.0.0.1", 0, kTorchToken};
  LoopServer server(o);
  RawPeer peer(server.port());
  peer.send(req(Dialect::kTorch113, TOp::kSet, {"/a/key/of/some/length"}, {"v"}));
  EXPECT_TRUE(peer.closed_by_peer(3s));
  EXPECT_TRUE(any_line_has(server.log_lines(), "bad magic", "127.0.0.1:"));
}

}  // namespace
}  // namespace mlrun::rendezvous
