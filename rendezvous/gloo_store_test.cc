// GlooStore: real Gloo contexts find each other through the rendezvous and allreduce.
#include "mlrun/gloo_store.hpp"

#include <thread>

#include <gloo/allreduce_ring.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <gtest/gtest.h>

namespace mlrun::rendezvous {
namespace {

using namespace std::chrono_literals;

TEST(GlooStore, FourRanksConnectAndAllreduce) {
  constexpr int kRanks = 4;
  Server server = Server::start(ServerOptions{"127.0.0.1", 0, "gloo-token"});
  std::vector<std::vector<int>> results(kRanks);
  std::vector<std::thread> ts;
  for (int i = 0; i < kRanks; ++i) {
    ts.emplace_back([&] {
      ClientOptions o;
      o.timeout = 20s;
      Client c = Client::connect(server.endpoint(), "gloo-token", o);
      int rank = c.join(kRanks);
      GlooStore store(c, "test");
      gloo::transport::tcp::attr attr;
      attr.hostname = "127.0.0.1";
      auto device = gloo::transport::tcp::CreateDevice(attr);
      auto context = std::make_shared<gloo::rendezvous::Context>(rank, kRanks);
      context->setTimeout(20s);
      context->connectFullMesh(store, device);
      std::vector<int> data = {rank, 10 * rank, 1};
      std::vector<int*> ptrs = {data.data()};
      gloo::AllreduceRing<int> allreduce(context, ptrs, static_cast<int>(data.size()));
      allreduce.run();
      results[rank] = data;
      // No rank tears its pairs down while another may still be sending on them.
      c.barrier("done");
    });
  }
  for (auto& t : ts) t.join();
  for (const auto& r : results) EXPECT_EQ(r, (std::vector<int>{6, 60, 4}));
}

TEST(GlooStore, KeysArePrefixedAndGetBlocks) {
  Server server = Server::start(ServerOptions{"127.0.0.1", 0, "gloo-token"});
  ClientOptions o;
  o.generation = 2;
  Client a = Client::connect(server.endpoint(), "gloo-token", o);
  Client b = Client::connect(server.endpoint(), "gloo-token", o);
  GlooStore sa(a, "p");
  GlooStore sb(b, "p");
  std::vector<char> got;
  std::thread reader([&] { got = sb.get("k"); });
  sa.set("k", {'x', '\0', 'y'});
  reader.join();
  EXPECT_EQ(got, (std::vector<char>{'x', '\0', 'y'}));
  EXPECT_EQ(a.get("mlrun/gloo/g2/p/k"), std::string("x\0y", 3));
  sb.wait({"k"}, 1s);
  EXPECT_THROW(sb.wait({"other"}, 50ms), TimeoutError);
}

}  // namespace
}  // namespace mlrun::rendezvous
