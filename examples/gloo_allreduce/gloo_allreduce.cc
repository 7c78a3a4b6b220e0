// A Gloo allreduce whose ranks find each other through mlrun's rendezvous:
//   mlrun --nproc_per_node=4 --no_python build/examples/gloo_allreduce/gloo_allreduce
// Each rank contributes {rank + i}; the result is checked against the sum over all ranks, and
// the process exits non-zero on any mismatch or rendezvous error.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include <gloo/allreduce_ring.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>
#include <mlrun/gloo_store.hpp>
#include <mlrun/rendezvous.hpp>

namespace {

namespace rdzv = mlrun::rendezvous;
using namespace std::chrono_literals;

constexpr int kElements = 1024;

// The interface Gloo listens on: GLOO_SOCKET_IFNAME (mlrun sets it to the interface it chose),
// else the host name when the job spans hosts, else loopback.
gloo::transport::tcp::attr device_attr() {
  gloo::transport::tcp::attr attr;
  const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
  const char* local_world = std::getenv("LOCAL_WORLD_SIZE");
  const char* world = std::getenv("WORLD_SIZE");
  bool one_host = local_world != nullptr && world != nullptr && std::string(local_world) == world;
  if (ifname != nullptr && *ifname != '\0') {
    attr.iface = ifname;
  } else if (one_host) {
    attr.hostname = "127.0.0.1";
  } else {
    char name[256] = {};
    gethostname(name, sizeof(name) - 1);
    attr.hostname = name;
  }
  return attr;
}

int run() {
  rdzv::Client client = rdzv::Client::from_env();
  client.set_timeout(60s);
  const int rank = client.rank();
  const int world = client.world_size();
  if (rank < 0 || world < 1) {
    std::fprintf(stderr, "gloo_allreduce: RANK and WORLD_SIZE must be set (run it with mlrun)\n");
    return 2;
  }

  // Gloo's full mesh: every pair exchanges addresses through the store, i.e. mlrun's server.
  rdzv::GlooStore store(client, "gloo_allreduce");
  auto device = gloo::transport::tcp::CreateDevice(device_attr());
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, world);
  context->setTimeout(60s);
  context->connectFullMesh(store, device);

  std::vector<long> data(kElements);
  for (int i = 0; i < kElements; ++i) data[i] = rank + i;
  std::vector<long*> ptrs = {data.data()};
  gloo::AllreduceRing<long> allreduce(context, ptrs, kElements);
  allreduce.run();

  // sum over r of (r + i) = world (world - 1) / 2 + world i
  int wrong = 0;
  for (int i = 0; i < kElements; ++i) {
    long expected = static_cast<long>(world) * (world - 1) / 2 + static_cast<long>(world) * i;
    if (data[i] != expected) {
      if (wrong++ < 5) {
        std::fprintf(stderr, "gloo_allreduce: rank %d: element %d is %ld, expected %ld\n", rank, i,
                     data[i], expected);
      }
    }
  }
  if (wrong > 0) {
    std::fprintf(stderr, "gloo_allreduce: rank %d: %d of %d elements wrong\n", rank, wrong,
                 kElements);
    return 1;
  }
  // Nobody leaves while a peer may still read from its pairs.
  client.barrier("gloo_allreduce/done");
  std::printf("gloo_allreduce: rank %d of %d: allreduce of %d elements correct\n", rank, world,
              kElements);
  return 0;
}

}  // namespace

int main() {
  try {
    return run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gloo_allreduce: %s\n", e.what());
    return 1;
  }
}
