// bench/rdzv: mlrun's rendezvous server alone in its own process, for bench/rdzv/bench.py.
//   rdzv_server TOKEN [HOST]
// Prints "port N" on stdout once it listens, then serves until stdin closes or reads "quit".
// Uses only the public API (Server::start), exactly as a trainer embedding the server would.
#include <cstdio>
#include <iostream>
#include <string>

#include "mlrun/rendezvous.hpp"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: rdzv_server TOKEN [HOST]\n");
    return 2;
  }
  using namespace mlrun::rendezvous;
  ServerOptions options;
  options.host = argc > 2 ? argv[2] : "127.0.0.1";
  options.port = 0;
  options.token = argv[1];
  Server server = Server::start(options);
  std::printf("port %d\n", server.port());
  std::fflush(stdout);
  std::string line;
  while (std::getline(std::cin, line) && line != "quit") {
  }
  server.stop();
  return 0;
}
