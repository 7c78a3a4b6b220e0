// The public client and server (<mlrun/rendezvous.hpp>) end to end.
#include <dlfcn.h>
#include <stdlib.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <set>
#include <thread>

#include <gtest/gtest.h>

#include "mlrun/rendezvous.hpp"
#include "rendezvous/protocol.h"

namespace mlrun::rendezvous {
namespace {

using namespace std::chrono_literals;

constexpr const char* kClientToken = "client-test-token";

ClientOptions client_options(int generation = 0) {
  ClientOptions o;
  o.connect_timeout = 5s;
  o.timeout = 10s;
  o.generation = generation;
  return o;
}

struct Fixture : ::testing::Test {
  Server server = Server::start(ServerOptions{"127.0.0.1", 0, kClientToken});
  Client connect(int generation = 0) {
    return Client::connect(server.endpoint(), kClientToken, client_options(generation));
  }
};

using ClientTest = Fixture;

bool contains(const std::exception& e, std::string_view part) {
  return std::string_view(e.what()).find(part) != std::string_view::npos;
}

TEST_F(ClientTest, EndpointIsHostAndPort) {
  EXPECT_GT(server.port(), 0);
  EXPECT_EQ(server.endpoint(), "127.0.0.1:" + std::to_string(server.port()));
}

TEST_F(ClientTest, KeyValueStore) {
  Client c = connect();
  c.set("k", "v1");
  EXPECT_EQ(c.get("k"), "v1");
  c.set("k", std::string("\0bin\xff", 5));
  EXPECT_EQ(c.get("k"), std::string("\0bin\xff", 5));
  EXPECT_EQ(c.try_get("missing"), std::nullopt);
  EXPECT_EQ(c.try_get("k"), std::string("\0bin\xff", 5));

  EXPECT_EQ(c.add("n", 5), 5);
  EXPECT_EQ(c.add("n", -7), -2);
  EXPECT_EQ(c.get("n"), "-2");
  EXPECT_THROW(c.add("k", 1), Error);  // not an integer
  c.set("big", std::to_string(INT64_MAX));
  EXPECT_THROW(c.add("big", 1), Error);

  EXPECT_EQ(c.compare_set("cas", "", "first"), "first");        // missing matches ""
  EXPECT_EQ(c.compare_set("cas", "wrong", "second"), "first");  // no swap: current value
  EXPECT_EQ(c.compare_set("cas", "first", "second"), "second");
  EXPECT_EQ(c.compare_set("absent", "x", "y"), "");  // missing does not match "x"
  EXPECT_EQ(c.try_get("absent"), std::nullopt);

  EXPECT_TRUE(c.remove("cas"));
  EXPECT_FALSE(c.remove("cas"));
  EXPECT_EQ(c.try_get("cas"), std::nullopt);

  c.set("a", "1");
  c.set("b", "2");
  c.wait({"a", "b"}, 1s);
  c.wait({});
  // The connection is still fine after all the errors above.
  c.heartbeat();
}

// defer_hello: connect() sends hello and returns; the first request reads its reply first. The
// connection then works as any other; a wrong token is an AuthError from "connect" at that first
// request, and the server logged the refusal as for a waited-for hello.
TEST_F(ClientTest, DeferredHelloIsReadByTheFirstRequest) {
  ClientOptions o = client_options();
  o.defer_hello = true;
  Client c = Client::connect(server.endpoint(), kClientToken, o);
  c.set("deferred", "v");
  EXPECT_EQ(c.get("deferred"), "v");
  // A blocking request as the first one (an agent's join, here a get that another client
  // answers) reads the hello's reply before its own.
  Client waiting = Client::connect(server.endpoint(), kClientToken, o);
  std::thread setter([&] {
    std::this_thread::sleep_for(50ms);
    connect().set("later", "w");
  });
  EXPECT_EQ(waiting.get("later", 5s), "w");
  setter.join();

  Client wrong = Client::connect(server.endpoint(), "not-the-token", o);
  try {
    wrong.get("deferred");
    FAIL() << "a request went through after a wrong token";
  } catch (const AuthError& e) {
    EXPECT_TRUE(contains(e, "connect")) << e.what();
    EXPECT_TRUE(contains(e, "wrong token")) << e.what();
  }
  // The refusal closed the connection: no second chance on it.
  EXPECT_THROW(wrong.get("deferred"), Error);
}

// Replies come through the client's 4 KiB read buffer: values around its size and the largest
// value the protocol allows come back byte for byte, one after the other on one connection.
TEST_F(ClientTest, ValuesOfEverySizeComeBackWhole) {
  Client c = connect();
  std::int64_t small = 0;  // a small reply after each large one: the stream stays in step
  for (std::size_t n :
       {std::size_t{0}, std::size_t{1}, std::size_t{4000}, std::size_t{4071}, std::size_t{4096},
        std::size_t{4097}, std::size_t{70'000}, proto::kMaxValueBytes}) {
    std::string value(n, '\0');
    for (std::size_t i = 0; i < n; ++i) value[i] = static_cast<char>(i * 131 + n);
    c.set("v", value);
    EXPECT_EQ(c.get("v"), value) << n << " bytes";
    EXPECT_EQ(c.add("after", 1), ++small);
  }
}

TEST_F(ClientTest, GetAndWaitBlockUntilAnotherClientSets) {
  Client setter = connect();
  std::string got;
  std::thread getter([&] {
    Client c = connect();
    got = c.get("late");
    c.wait({"late", "later"}, 10s);
  });
  setter.set("late", "value");
  setter.set("later", "x");
  getter.join();
  EXPECT_EQ(got, "value");
}

TEST_F(ClientTest, TimeoutsNameWhatTheyWaitedFor) {
  Client c = connect();
  auto start = std::chrono::steady_clock::now();
  try {
    c.get("the-missing-key", 100ms);
    FAIL();
  } catch (const TimeoutError& e) {
    EXPECT_TRUE(contains(e, "the-missing-key")) << e.what();
    EXPECT_TRUE(contains(e, server.endpoint())) << e.what();
    EXPECT_EQ(e.op(), "get");
    EXPECT_EQ(e.subject(), "the-missing-key");
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  c.set("present", "1");
  try {
    c.wait({"present", "absent-one"}, 50ms);
    FAIL();
  } catch (const TimeoutError& e) {
    EXPECT_TRUE(contains(e, "absent-one")) << e.what();
  }
  try {
    c.barrier("lonely", 3, 50ms);
    FAIL();
  } catch (const TimeoutError& e) {
    EXPECT_TRUE(contains(e, "lonely")) << e.what();
    EXPECT_TRUE(contains(e, "1 of 3")) << e.what();
  }
  try {
    c.join(2, 50ms);
    FAIL();
  } catch (const TimeoutError& e) {
    EXPECT_TRUE(contains(e, "1 of 2")) << e.what();
  }
  // A timeout reported by the server leaves the connection usable.
  EXPECT_EQ(c.get("present"), "1");
}

TEST_F(ClientTest, ArgumentsOverTheLimitsAreRefusedBeforeSending) {
  Client c = connect();
  EXPECT_THROW(c.set(std::string(5000, 'k'), "v"), Error);
  EXPECT_THROW(c.set("k", std::string(5u << 20, 'v')), Error);
  EXPECT_THROW(c.barrier("b", 0, 1s), Error);
  EXPECT_THROW(c.join(0), Error);
  EXPECT_THROW(c.join_node(2, 1, 2), Error);
  EXPECT_THROW(c.barrier("b"), Error);         // world size unknown
  EXPECT_THROW(c.nccl_unique_id("x"), Error);  // rank unknown
  c.heartbeat();
}

TEST_F(ClientTest, AbortWakesEveryWaiterAndStaysVisible) {
  std::atomic<int> aborted{0};
  std::vector<std::thread> waiters;
  std::atomic<int> ready{0};
  auto expect_aborted = [&](auto&& op) {
    try {
      op();
      ADD_FAILURE() << "not aborted";
    } catch (const AbortedError& e) {
      EXPECT_EQ(e.detail(), "rank 5 failed");
      aborted++;
    }
  };
  waiters.emplace_back([&] {
    Client c = connect();
    ready++;
    expect_aborted([&] { c.get("never", 60s); });
  });
  waiters.emplace_back([&] {
    Client c = connect();
    ready++;
    expect_aborted([&] { c.wait({"never"}, 60s); });
  });
  waiters.emplace_back([&] {
    Client c = connect();
    ready++;
    expect_aborted([&] { c.barrier("never", 10, 60s); });
  });
  waiters.emplace_back([&] {
    Client c = connect();
    ready++;
    expect_aborted([&] { c.join(10, 60s); });
  });
  while (ready < 4) std::this_thread::yield();
  Client aborter = connect();
  // The waiters may not have sent their requests yet; either way they see the abort.
  aborter.abort("rank 5 failed");
  for (auto& t : waiters) t.join();
  EXPECT_EQ(aborted.load(), 4);
  // Visible to every client, old and new.
  EXPECT_THROW(aborter.heartbeat(), AbortedError);
  Client late = connect();
  try {
    late.set("k", "v");
    FAIL();
  } catch (const AbortedError& e) {
    EXPECT_TRUE(contains(e, "rank 5 failed")) << e.what();
  }
  aborter.abort("again");  // aborting an aborted job is not an error
}

TEST(ClientServer, ServerAbortCallsOnAbortOnce) {
  std::atomic<int> calls{0};
  std::string reason;
  ServerOptions o{"127.0.0.1", 0, kClientToken};
  o.on_abort = [&](std::string_view r) {
    reason = std::string(r);
    calls++;
  };
  Server s = Server::start(std::move(o));
  Client c = Client::connect(s.endpoint(), kClientToken, client_options());
  s.abort("launcher says stop");
  s.abort("second");
  EXPECT_THROW(c.heartbeat(), AbortedError);
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(reason, "launcher says stop");
}

// A launcher that aborts at its start (node 0 whose own plan failed) counts the joins told of
// it: one held when the abort came and those after it; other requests do not count.
TEST(ClientServer, ServerCountsTheJoinsAnsweredWithTheAbort) {
  std::promise<void> joined;
  ServerOptions o{"127.0.0.1", 0, kClientToken};
  o.on_join = [&](std::string_view, std::uint32_t, std::uint32_t, std::uint64_t) {
    joined.set_value();
  };
  Server s = Server::start(std::move(o));
  std::thread held([&] {
    Client c = Client::connect(s.endpoint(), kClientToken, client_options());
    EXPECT_THROW(c.join_node(3, 1, 1, 10s), AbortedError);
  });
  joined.get_future().wait();  // The join is held on the server.
  EXPECT_EQ(s.aborted_joins(), 0u);
  s.abort("node 0 cannot start");
  held.join();
  EXPECT_EQ(s.aborted_joins(), 1u);
  Client late = Client::connect(s.endpoint(), kClientToken, client_options());
  EXPECT_THROW(late.get("x", 1s), AbortedError);
  EXPECT_EQ(s.aborted_joins(), 1u);
  EXPECT_THROW(late.join_node(3, 1, 2, 1s), AbortedError);
  EXPECT_EQ(s.aborted_joins(), 2u);
}

// The server reports each join of a group as it takes it: members so far, size, weights so far;
// a member that leaves before the group completes takes its weight with it.
TEST(ClientServer, ServerReportsEachJoinWithItsWeights) {
  struct Seen {
    std::uint32_t joined, size;
    std::uint64_t weight;
    bool operator==(const Seen&) const = default;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Seen> seen;
  std::string group;
  ServerOptions o{"127.0.0.1", 0, kClientToken};
  o.on_join = [&](std::string_view g, std::uint32_t joined, std::uint32_t size, std::uint64_t w) {
    std::lock_guard lock(mu);
    group = std::string(g);
    seen.push_back({joined, size, w});
    cv.notify_all();
  };
  Server s = Server::start(std::move(o));
  auto wait_for = [&](std::size_t n) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, 10s, [&] { return seen.size() >= n; });
  };
  std::vector<std::thread> ts;
  auto node = [&](int local_world, std::chrono::milliseconds timeout, bool completes) {
    ts.emplace_back([&, local_world, timeout, completes] {
      Client c = Client::connect(s.endpoint(), kClientToken, client_options());
      if (completes) {
        EXPECT_EQ(c.join_node(3, local_world, -1, timeout).world_size, 7);
      } else {
        EXPECT_THROW(c.join_node(3, local_world, -1, timeout), TimeoutError);
      }
    });
  };
  node(2, 20s, true);
  ASSERT_TRUE(wait_for(1));
  node(3, 300ms, false);  // gives up before the group is complete
  ASSERT_TRUE(wait_for(2));
  ts.back().join();
  ts.pop_back();
  node(1, 20s, true);
  ASSERT_TRUE(wait_for(3));
  node(4, 20s, true);
  ASSERT_TRUE(wait_for(4));
  for (auto& t : ts) t.join();
  std::lock_guard lock(mu);
  EXPECT_EQ(group, "mlrun/join/g0/nodes");
  EXPECT_EQ(seen, (std::vector<Seen>{{1, 3, 2}, {2, 3, 5}, {2, 3, 3}, {3, 3, 7}}));
}

TEST_F(ClientTest, JoinGivesRanksInJoinOrder) {
  constexpr int kWorld = 8;
  std::vector<int> ranks(kWorld);
  std::vector<std::thread> ts;
  for (int i = 0; i < kWorld; ++i) {
    ts.emplace_back([&, i] {
      Client c = connect();
      ranks[i] = c.join(kWorld);
      EXPECT_EQ(c.rank(), ranks[i]);
      EXPECT_EQ(c.world_size(), kWorld);
      c.barrier("joined");  // uses world_size() from the join
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(std::set<int>(ranks.begin(), ranks.end()), (std::set<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  // The group is complete: a ninth member is refused, not left waiting.
  EXPECT_THROW(connect().join(kWorld, 1s), Error);
  // A new generation is a new group.
  int r1 = -1;
  std::thread other([&] { r1 = connect(1).join(2); });
  int r2 = connect(1).join(2);
  other.join();
  EXPECT_EQ(std::set<int>({r1, r2}), (std::set<int>{0, 1}));
}

TEST_F(ClientTest, JoinCanAskForARank) {
  // The one that asks for rank 0 gets it and the others fill 1..3, whatever the order of
  // arrival (it usually arrives last here: the others start first).
  constexpr int kWorld = 4;
  std::vector<int> ranks(kWorld - 1);
  std::vector<std::thread> ts;
  for (int i = 0; i < kWorld - 1; ++i) {
    ts.emplace_back([&, i] { ranks[i] = connect().join(kWorld); });
  }
  std::this_thread::sleep_for(50ms);
  int mine = connect().join(kWorld, 0, 5s);
  for (auto& t : ts) t.join();
  EXPECT_EQ(mine, 0);
  EXPECT_EQ(std::set<int>(ranks.begin(), ranks.end()), (std::set<int>{1, 2, 3}));
  EXPECT_THROW(connect(1).join(2, 2, 1s), Error);  // Out of range.
}

TEST_F(ClientTest, NodeJoinFollowsTheRankLayout) {
  // Node "c" asks for node rank 2; "a" and "b" take the free ranks in join order.
  struct Node {
    int requested, local_world;
    NodeAssignment got;
  };
  std::vector<Node> nodes = {{-1, 2, {}}, {-1, 3, {}}, {2, 4, {}}};
  std::vector<std::thread> ts;
  for (auto& n : nodes) {
    ts.emplace_back([&] {
      Client c = connect();
      n.got = c.join_node(3, n.local_world, n.requested);
      EXPECT_EQ(c.node_rank(), n.got.node_rank);
      EXPECT_EQ(c.world_size(), 9);
    });
  }
  for (auto& t : ts) t.join();
  EXPECT_EQ(nodes[2].got.node_rank, 2);
  EXPECT_EQ(nodes[2].got.rank_offset, 5);
  std::set<int> free_ranks{nodes[0].got.node_rank, nodes[1].got.node_rank};
  EXPECT_EQ(free_ranks, (std::set<int>{0, 1}));
  for (const auto& n : nodes) {
    EXPECT_EQ(n.got.nnodes, 3);
    EXPECT_EQ(n.got.world_size, 9);
  }
  // Offsets are prefix sums of local world sizes in node-rank order.
  const Node& first = nodes[0].got.node_rank == 0 ? nodes[0] : nodes[1];
  const Node& second = nodes[0].got.node_rank == 0 ? nodes[1] : nodes[0];
  EXPECT_EQ(first.got.rank_offset, 0);
  EXPECT_EQ(second.got.rank_offset, first.local_world);
}

TEST_F(ClientTest, NodeJoinRefusesATakenNodeRank) {
  // Two nodes both ask for node rank 0 of 2: whichever comes second is refused at once; the
  // first waits for a second node that never comes.
  std::atomic<int> refused{0}, timed_out{0};
  auto node = [&] {
    Client c = connect();
    try {
      c.join_node(2, 1, 0, 3s);
      ADD_FAILURE() << "a group of 2 completed with one node rank claimed twice";
    } catch (const TimeoutError&) {
      timed_out++;
    } catch (const Error& e) {
      EXPECT_TRUE(contains(e, "already taken")) << e.what();
      refused++;
    }
  };
  std::thread first(node), second(node);
  first.join();
  second.join();
  EXPECT_EQ(refused.load(), 1);
  EXPECT_EQ(timed_out.load(), 1);
}

TEST_F(ClientTest, FromEnvReadsTheWorkerEnvironment) {
  setenv("MLRUN_RDZV_ENDPOINT", server.endpoint().c_str(), 1);
  setenv("MLRUN_RDZV_TOKEN", kClientToken, 1);
  setenv("MLRUN_JOB_ID", "", 1);
  setenv("RANK", "5", 1);
  setenv("WORLD_SIZE", "8", 1);
  setenv("LOCAL_RANK", "1", 1);
  setenv("LOCAL_WORLD_SIZE", "4", 1);
  setenv("GROUP_RANK", "1", 1);
  setenv("TORCHELASTIC_RESTART_COUNT", "3", 1);
  Client c = Client::from_env();
  EXPECT_EQ(c.rank(), 5);
  EXPECT_EQ(c.world_size(), 8);
  EXPECT_EQ(c.local_rank(), 1);
  EXPECT_EQ(c.local_world_size(), 4);
  EXPECT_EQ(c.node_rank(), 1);
  EXPECT_EQ(c.generation(), 3);
  setenv("RANK", "five", 1);
  EXPECT_THROW(Client::from_env(), Error);
  for (const char* v : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                        "TORCHELASTIC_RESTART_COUNT", "MLRUN_JOB_ID"}) {
    unsetenv(v);
  }
  Client bare = Client::from_env();
  EXPECT_EQ(bare.rank(), -1);
  unsetenv("MLRUN_RDZV_ENDPOINT");
  try {
    Client::from_env();
    FAIL();
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e, "MLRUN_RDZV_ENDPOINT")) << e.what();
  }
  unsetenv("MLRUN_RDZV_TOKEN");
}

TEST(ClientServer, ConnectFailsWithinItsTimeout) {
  int port;
  {
    Server s = Server::start(ServerOptions{"127.0.0.1", 0, kClientToken});
    port = s.port();
  }  // nothing listens there now
  ClientOptions o = client_options();
  o.connect_timeout = 300ms;
  auto start = std::chrono::steady_clock::now();
  try {
    Client::connect("127.0.0.1:" + std::to_string(port), kClientToken, o);
    FAIL();
  } catch (const ConnectionError& e) {
    EXPECT_TRUE(contains(e, "127.0.0.1:" + std::to_string(port))) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 3s);
  EXPECT_THROW(Client::connect("no-port", kClientToken, o), Error);
  EXPECT_THROW(Client::connect("[::1:5", kClientToken, o), Error);
}

TEST(ClientServer, ConnectRetriesUntilTheServerListens) {
  // Find a free port, then start the server on it after the client began connecting.
  int port;
  {
    Server probe = Server::start(ServerOptions{"127.0.0.1", 0, kClientToken});
    port = probe.port();
  }
  std::thread late([&] {
    std::this_thread::sleep_for(200ms);  // the delay under test, not synchronisation
    Server s = Server::start(ServerOptions{"127.0.0.1", port, kClientToken});
    Client c = Client::connect(s.endpoint(), kClientToken, client_options());
    c.get("done", 10s);
  });
  Client c = Client::connect("127.0.0.1:" + std::to_string(port), kClientToken, client_options());
  c.set("done", "1");
  late.join();
}

TEST_F(ClientTest, ClosedClientThrowsConnectionError) {
  Client c = connect();
  c.close();
  EXPECT_THROW(c.heartbeat(), ConnectionError);
}

TEST_F(ClientTest, InterruptWakesACallBlockedOnAnotherThread) {
  Client c = connect();
  std::atomic<bool> started{false};
  std::string what;
  std::thread waiter([&] {
    started = true;
    try {
      c.get("never-set", 60s);
      what = "returned";
    } catch (const ConnectionError&) {
      what = "ConnectionError";
    } catch (const std::exception& e) {
      what = e.what();  // A TimeoutError: the interrupt did not wake it.
    }
  });
  while (!started) std::this_thread::yield();
  std::this_thread::sleep_for(100ms);  // Blocked in its get by now.
  c.interrupt();
  waiter.join();
  EXPECT_EQ(what, "ConnectionError");
  EXPECT_THROW(c.set("k", "v"), ConnectionError);
  c.interrupt();  // Again, on a dropped connection: nothing.
}

TEST_F(ClientTest, BarrierCanBeReusedRoundAfterRound) {
  constexpr int kWorld = 4;
  std::atomic<int> counter{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < kWorld; ++i) {
    ts.emplace_back([&] {
      Client c = connect();
      for (int round = 0; round < 10; ++round) {
        counter++;
        c.barrier("step", kWorld, 10s);
        // Everyone of this round arrived before anyone left it.
        EXPECT_GE(counter.load(), (round + 1) * kWorld);
        c.barrier("step2", kWorld, 10s);
      }
    });
  }
  for (auto& t : ts) t.join();
}

bool nccl_loadable(std::string* why) {
  void* h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    *why = dlerror();
    return false;
  }
  return true;  // kept loaded, as the library does
}

TEST_F(ClientTest, NcclUniqueIdsAreIdenticalOnEveryRankAndFreshPerGeneration) {
  std::string why;
  if (!nccl_loadable(&why)) GTEST_SKIP() << "libnccl.so.2 cannot be loaded: " << why;
  constexpr int kRanks = 8;
  std::vector<std::array<char, 128>> ids(kRanks), again(kRanks);
  std::vector<std::thread> ts;
  for (int i = 0; i < kRanks; ++i) {
    ts.emplace_back([&, i] {
      Client c = connect();
      int rank = c.join(kRanks);
      ids[rank] = c.nccl_unique_id("world");
      again[rank] = c.nccl_unique_id("world");  // same generation, same name: same ID
    });
  }
  for (auto& t : ts) t.join();
  std::array<char, 128> zero{};
  EXPECT_NE(ids[0], zero);
  for (int r = 0; r < kRanks; ++r) {
    EXPECT_EQ(ids[r], ids[0]) << "rank " << r;
    EXPECT_EQ(again[r], ids[0]) << "rank " << r;
  }
  // Another communicator, and the next generation, get different IDs.
  Client root = connect();
  EXPECT_NE(root.nccl_unique_id("other", true, 5s), ids[0]);
  Client next = connect(1);
  auto fresh = next.nccl_unique_id("world", true, 5s);
  EXPECT_NE(fresh, ids[0]);
  EXPECT_EQ(connect(1).nccl_unique_id("world", false, 5s), fresh);
}

TEST_F(ClientTest, NcclMemberSeesTheRootsFailureInsteadOfATimeout) {
  // What a root that cannot load NCCL publishes (client.cc, kNcclErrorMarker).
  Client root = connect();
  root.set("mlrun/nccl/g0/broken", "mlrun-nccl-error: cannot load libnccl.so.2: not found");
  Client member = connect();
  try {
    member.nccl_unique_id("broken", false, 5s);
    FAIL();
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e, "cannot load libnccl.so.2")) << e.what();
    EXPECT_TRUE(contains(e, "broken")) << e.what();
  }
}

}  // namespace
}  // namespace mlrun::rendezvous
