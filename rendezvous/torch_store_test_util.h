// Recorded TCPStore sessions for the tests: tests/rendezvous/torch_sessions/*.txt, written by
// tests/rendezvous/torch_store_proxy.py between a real torch client and PyTorch's own server.
#pragma once

#include <fstream>
#include <string>
#include <vector>

namespace mlrun::rendezvous::torch::testing {

struct Chunk {
  bool from_client = false;  // "c2s": client to server; "s2c": the server's reply bytes
  std::string bytes;
};

/// The chunks of a session file in the order they were seen; empty when it cannot be read.
inline std::vector<Chunk> load_session(const std::string& name) {
  std::ifstream in(std::string(MLRUN_TORCH_SESSIONS_DIR) + "/" + name);
  std::vector<Chunk> chunks;
  std::string tag, hex;
  while (in >> tag >> hex) {
    Chunk c{tag == "c2s", {}};
    for (std::size_t i = 0; i + 1 < hex.size(); i += 2) {
      c.bytes.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
    }
    chunks.push_back(std::move(c));
  }
  return chunks;
}

}  // namespace mlrun::rendezvous::torch::testing
