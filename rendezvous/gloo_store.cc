#include "mlrun/gloo_store.hpp"

namespace mlrun::rendezvous {

GlooStore::GlooStore(Client& client, std::string prefix)
    : client_(client),
      prefix_("mlrun/gloo/g" + std::to_string(client.generation()) + "/" + prefix + "/") {}

void GlooStore::set(const std::string& key, const std::vector<char>& data) {
  client_.set(full(key), std::string(data.begin(), data.end()));
}

std::vector<char> GlooStore::get(const std::string& key) {
  std::string value = client_.get(full(key));
  return std::vector<char>(value.begin(), value.end());
}

void GlooStore::wait(const std::vector<std::string>& keys) {
  wait(keys, client_.timeout());
}

void GlooStore::wait(const std::vector<std::string>& keys,
                     const std::chrono::milliseconds& timeout) {
  std::vector<std::string> full_keys;
  full_keys.reserve(keys.size());
  for (const auto& k : keys) full_keys.push_back(full(k));
  client_.wait(full_keys, timeout);
}

}  // namespace mlrun::rendezvous
