// A gloo::rendezvous::Store over an mlrun rendezvous Client, so that Gloo contexts
// (connectFullMesh) find each other through mlrun's server. Link mlrun::rendezvous_gloo.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>

#include "mlrun/rendezvous.hpp"

namespace mlrun::rendezvous {

/// Keys are stored as "mlrun/gloo/g<generation>/<prefix>/<key>": every restart generation
/// gets fresh keys, and two prefixes never see each other's. Uses the Client's connection, so
/// it inherits its rules (one thread at a time) and its errors (docs/errors.md).
class MLRUN_RDZV_EXPORT GlooStore : public gloo::rendezvous::Store {
 public:
  /// client must outlive the store.
  GlooStore(Client& client, std::string prefix);

  void set(const std::string& key, const std::vector<char>& data) override;
  /// Blocks until the key is set, up to the client's timeout().
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  std::string full(const std::string& key) const { return prefix_ + key; }
  Client& client_;
  std::string prefix_;
};

}  // namespace mlrun::rendezvous
