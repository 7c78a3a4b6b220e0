// One key space of the TCPStore that mlrun's server serves to PyTorch (docs/torch-store.md):
// the keys of one training attempt. Counts its real memory (rendezvous/memory.h) against a
// budget, its own or the server's one cap, and refuses what would pass it; knows nothing of
// connections (the server keeps the waiters).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>

#include "rendezvous/memory.h"
#include "rendezvous/torch_store.h"

namespace mlrun::rendezvous::torch {

class KeySpace {
 public:
  /// A key space with a budget of its own of max_bytes (tests use a small one).
  explicit KeySpace(std::size_t max_bytes = kMaxSpaceBytes) : own_(max_bytes), budget_(&own_) {}
  /// A key space charged to a shared budget (the server's one cap), which must outlive it.
  explicit KeySpace(MemoryBudget& shared) : own_(0), budget_(&shared) {}
  KeySpace(const KeySpace&) = delete;
  KeySpace& operator=(const KeySpace&) = delete;
  ~KeySpace() { budget_->change(memory_, 0); }

  enum class Result { kOk, kTooManyKeys, kFull, kNotInteger, kOverflow };

  /// The value of key, or nullptr.
  const std::string* find(const std::string& key) const;
  bool contains(const std::string& key) const { return map_.contains(key); }
  Result set(const std::string& key, std::string value);
  /// Adds delta to the key's decimal value (missing: 0); *out is the sum.
  Result add(const std::string& key, std::int64_t delta, std::int64_t* out);
  Result append(const std::string& key, std::string_view tail);
  /// PyTorch's semantics: a missing key with empty `expected` takes `desired`; a missing key
  /// otherwise stays missing and *out is `expected`; a present key equal to `expected` takes
  /// `desired`. *out is the value after the call. *changed: the key was written.
  Result compare_set(const std::string& key, const std::string& expected, std::string desired,
                     std::string* out, bool* changed);
  bool erase(const std::string& key);
  /// Forgets every key and gives their memory back (the table's buckets too).
  void clear();
  std::size_t size() const { return map_.size(); }
  /// Real memory held: each entry's node and buckets plus its strings' blocks.
  std::size_t memory() const { return memory_; }
  static std::string_view why(Result r);

 private:
  static std::size_t cost(const std::string& key, const std::string& value);
  Result admit(const std::string& key, std::size_t old_cost, std::size_t new_cost) const;

  std::unordered_map<std::string, std::string> map_;
  std::size_t memory_ = 0;
  MemoryBudget own_;
  MemoryBudget* budget_;
};

}  // namespace mlrun::rendezvous::torch
