// What the rendezvous server's state costs in real memory (what glibc's malloc hands out for a
// container's parts, not just the bytes of keys and values), and the one budget every part of
// it is charged to: store entries, TCPStore key spaces, held requests with their key lists,
// join groups and barriers waiting for members, finished join groups (docs/protocol.md,
// "Memory"). Internal, header-only.
#pragma once

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

namespace mlrun::rendezvous {

/// A malloc'd block of n bytes: a header word, 16-byte granules, 32 bytes at least (glibc on a
/// 64-bit machine).
constexpr std::size_t block_bytes(std::size_t n) {
  return n == 0 ? 0 : std::max<std::size_t>(32, (n + 8 + 15) & ~std::size_t{15});
}
/// The heap block of a std::string of this capacity: none for up to 15 characters (kept inside
/// the string itself).
constexpr std::size_t string_heap_bytes(std::size_t capacity) {
  return capacity > 15 ? block_bytes(capacity + 1) : 0;
}
/// An entry of a hash table: its node (next pointer, the element, the cached hash) and its
/// share of the bucket array (up to two pointers per entry as the table grows).
constexpr std::size_t hash_entry_bytes(std::size_t element) {
  return block_bytes(sizeof(void*) + element + sizeof(std::size_t)) + 2 * sizeof(void*);
}
/// An entry of an unordered_map<string, string> with strings of these capacities (the table's
/// copy of a key is allocated to the key's size).
constexpr std::size_t map_entry_bytes(std::size_t key_capacity, std::size_t value_capacity) {
  return hash_entry_bytes(2 * sizeof(std::string)) + string_heap_bytes(key_capacity) +
         string_heap_bytes(value_capacity);
}
inline std::size_t map_entry_bytes(const std::string& key, const std::string& value) {
  return map_entry_bytes(key.capacity(), value.capacity());
}
/// Moves value into slot. Move-assigning a short string keeps slot's old heap block: a block
/// far larger than the value is given back, so that what is counted is what is held.
inline void assign_value(std::string& slot, std::string value) {
  slot = std::move(value);
  if (slot.capacity() > slot.size() * 2 + 15) slot.shrink_to_fit();
}
/// A string held somewhere that is not a hash table (a member, a vector's element).
inline std::size_t string_bytes(const std::string& s) {
  return sizeof(std::string) + string_heap_bytes(s.capacity());
}
/// A vector of strings: its array and each string's block.
inline std::size_t strings_bytes(const std::vector<std::string>& v) {
  std::size_t n = block_bytes(v.capacity() * sizeof(std::string));
  for (const auto& s : v) n += string_heap_bytes(s.capacity());
  return n;
}

/// One cap on the memory held for clients. Charges are released by whoever made them; a charge
/// that must not fail (a finished join group's record) may pass the cap, and then the next
/// request that needs memory is refused.
class MemoryBudget {
 public:
  explicit MemoryBudget(std::size_t max) : max_(max) {}
  /// True when replacing a charge of `release` bytes by one of `take` stays within the cap.
  bool fits(std::size_t release, std::size_t take) const { return used_ - release + take <= max_; }
  void change(std::size_t release, std::size_t take) { used_ = used_ - release + take; }
  std::size_t used() const { return used_; }
  std::size_t max() const { return max_; }

 private:
  std::size_t used_ = 0;
  std::size_t max_;
};

}  // namespace mlrun::rendezvous
