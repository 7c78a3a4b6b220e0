// The head's running count of the ranks that have joined a multi-node job, for the info log:
// "ranks joined n/N" at the first node, at every tenth of the world and at the last, from the
// rendezvous server's join callback (ServerOptions::on_join).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace mlrun {

class JoinProgress {
 public:
  JoinProgress(std::uint64_t world_size, std::chrono::steady_clock::time_point began)
      : world_size_(world_size), began_(began) {}

  /// One join the server took. Returns the line to log, or nothing: joins of groups other
  /// than the nodes' (Client::join_node: "mlrun/join/gN/nodes"), and those between two
  /// tenths of the world. Each attempt (gN) counts afresh.
  std::optional<std::string> on_join(std::string_view group, std::uint32_t joined,
                                     std::uint32_t size, std::uint64_t ranks);

 private:
  std::uint64_t world_size_;
  std::chrono::steady_clock::time_point began_;
  std::string group_;             // the attempt's node group being counted
  std::uint64_t tenths_said_ = 0;  // the highest tenth of the world logged in it
};

}  // namespace mlrun
