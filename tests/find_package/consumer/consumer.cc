// Uses the installed library: a Server, two Clients, the store, a blocking get, add, a barrier.
// Exits 0 only if every check holds.
#include <chrono>
#include <cstdio>
#include <exception>
#include <string>
#include <thread>

#include <mlrun/rendezvous.hpp>

namespace rdzv = mlrun::rendezvous;
using namespace std::chrono_literals;

#define CHECK(cond)                                                                     \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::fprintf(stderr, "consumer: check failed at line %d: %s\n", __LINE__, #cond); \
      return 1;                                                                         \
    }                                                                                   \
  } while (0)

int main() {
  try {
    rdzv::Server server =
        rdzv::Server::start(rdzv::ServerOptions{"127.0.0.1", 0, "consumer-token"});
    CHECK(server.port() > 0);
    CHECK(server.endpoint() == "127.0.0.1:" + std::to_string(server.port()));
    rdzv::ClientOptions options;
    options.timeout = 20s;
    rdzv::Client a = rdzv::Client::connect(server.endpoint(), "consumer-token", options);
    rdzv::Client b = rdzv::Client::connect(server.endpoint(), "consumer-token", options);

    a.set("greeting", "hello from an installed mlrun");
    CHECK(b.get("greeting") == "hello from an installed mlrun");
    // A get that blocks until another client sets the key.
    std::string late;
    std::thread reader([&] { late = b.get("late"); });
    std::this_thread::sleep_for(50ms);
    a.set("late", std::string("x\0y", 3));
    reader.join();
    CHECK(late == std::string("x\0y", 3));
    CHECK(a.add("counter", 2) == 2);
    CHECK(b.add("counter", 3) == 5);
    std::thread other([&] { b.barrier("both", 2, 20s); });
    a.barrier("both", 2, 20s);
    other.join();

    bool refused = false;
    try {
      rdzv::Client::connect(server.endpoint(), "wrong-token", options);
    } catch (const rdzv::AuthError&) {
      refused = true;
    }
    CHECK(refused);
    std::printf("consumer: server at %s, set/get/add/barrier and a refused token: ok\n",
                server.endpoint().c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
}
