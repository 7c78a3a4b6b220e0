// A worker for the elastic cluster tests: connects with Client::from_env, checks that its
// generation is the round mlrun gave it, that this round's keys are fresh (a key a previous
// round set would be seen here), agrees on an NCCL unique ID with every rank, and prints
//   probe rank=R round=G restart=N key=fresh nccl=HEX
// Exit 0 on success, 2 on a stale key or a mismatch.
#include <cstdio>
#include <cstdlib>
#include <string>

#include <mlrun/rendezvous.hpp>

int main() {
  namespace rdzv = mlrun::rendezvous;
  try {
    rdzv::Client c = rdzv::Client::from_env();
    const char* round = std::getenv("MLRUN_RDZV_ROUND");
    const char* restart = std::getenv("TORCHELASTIC_RESTART_COUNT");
    if (round == nullptr || std::atoi(round) != c.generation()) {
      std::printf("probe rank=%d: generation %d is not MLRUN_RDZV_ROUND %s\n", c.rank(),
                  c.generation(), round ? round : "(unset)");
      return 2;
    }
    // Key names as the client library scopes them (docs/protocol.md): one per round.
    std::string key = "mlrun/gloo/g" + std::to_string(c.generation()) + "/probe/" +
                      std::to_string(c.rank());
    std::string mine = "set in round " + std::string(round);
    std::string held = c.compare_set(key, "", mine);
    if (held != mine) {
      std::printf("probe rank=%d round=%s: stale key %s holds '%s'\n", c.rank(), round,
                  key.c_str(), held.c_str());
      return 2;
    }
    c.barrier("probe");
    std::string nccl;
    try {
      auto id = c.nccl_unique_id("world");
      char hex[3];
      for (int i = 0; i < 16; ++i) {
        std::snprintf(hex, sizeof hex, "%02x", static_cast<unsigned char>(id[i]));
        nccl += hex;
      }
      // The same bytes on every member: each rank records them, the test compares.
    } catch (const rdzv::Error& e) {
      nccl = "unavailable";
    }
    c.barrier("probe-end");
    std::printf("probe rank=%d round=%s restart=%s key=fresh nccl=%s\n", c.rank(), round,
                restart ? restart : "?", nccl.c_str());
    std::fflush(stdout);
    return 0;
  } catch (const std::exception& e) {
    std::printf("probe: %s\n", e.what());
    return 2;
  }
}
