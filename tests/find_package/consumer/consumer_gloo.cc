// Uses the installed GlooStore: two stores over two Clients of one Server see each other's keys.
#include <chrono>
#include <cstdio>
#include <exception>
#include <vector>

#include <mlrun/gloo_store.hpp>
#include <mlrun/rendezvous.hpp>

namespace rdzv = mlrun::rendezvous;

int main() {
  try {
    auto server = rdzv::Server::start(rdzv::ServerOptions{"127.0.0.1", 0, "gloo-consumer"});
    auto a = rdzv::Client::connect(server.endpoint(), "gloo-consumer");
    auto b = rdzv::Client::connect(server.endpoint(), "gloo-consumer");
    rdzv::GlooStore sa(a, "consumer");
    rdzv::GlooStore sb(b, "consumer");
    sa.set("k", {'4', '2'});
    sb.wait({"k"}, std::chrono::seconds(10));
    if (sb.get("k") != std::vector<char>{'4', '2'}) {
      std::fprintf(stderr, "consumer_gloo: wrong value\n");
      return 1;
    }
    std::printf("consumer_gloo: GlooStore set/wait/get: ok\n");
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer_gloo: %s\n", e.what());
    return 1;
  }
}
