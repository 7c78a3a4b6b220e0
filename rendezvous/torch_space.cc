#include "rendezvous/torch_space.h"

#include "rendezvous/integer.h"

namespace mlrun::rendezvous::torch {
std::size_t KeySpace::cost(const std::string& key, const std::string& value) {
  // The map's copy of a key is allocated to its size; a value is moved in as it is.
  return map_entry_bytes(key.size(), value.capacity());
}

KeySpace::Result KeySpace::admit(const std::string& key, std::size_t old_cost,
                                 std::size_t new_cost) const {
  if (old_cost == 0 && map_.size() >= kMaxKeys && !map_.contains(key)) {
    return Result::kTooManyKeys;
  }
  if (!budget_->fits(old_cost, new_cost)) return Result::kFull;
  return Result::kOk;
}

const std::string* KeySpace::find(const std::string& key) const {
  auto it = map_.find(key);
  return it == map_.end() ? nullptr : &it->second;
}

KeySpace::Result KeySpace::set(const std::string& key, std::string value) {
  value.shrink_to_fit();
  auto it = map_.find(key);
  std::size_t old_cost = it == map_.end() ? 0 : cost(it->first, it->second);
  if (Result r = admit(key, old_cost, cost(key, value)); r != Result::kOk) return r;
  if (it == map_.end()) {
    it = map_.emplace(key, std::move(value)).first;
  } else {
    assign_value(it->second, std::move(value));  // counts what is held, not what was given
  }
  std::size_t new_cost = cost(it->first, it->second);
  budget_->change(old_cost, new_cost);
  memory_ = memory_ - old_cost + new_cost;
  return Result::kOk;
}

KeySpace::Result KeySpace::add(const std::string& key, std::int64_t delta, std::int64_t* out) {
  std::int64_t value = 0;
  if (const std::string* text = find(key)) {
    if (!parse_integer(std::string_view(*text), value)) return Result::kNotInteger;
  }
  if (__builtin_add_overflow(value, delta, &value)) return Result::kOverflow;
  Result r = set(key, std::to_string(value));
  if (r == Result::kOk) *out = value;
  return r;
}

KeySpace::Result KeySpace::append(const std::string& key, std::string_view tail) {
  const std::string* old = find(key);
  std::string value = old ? *old : std::string();
  if (value.size() + tail.size() > kMaxValueBytes) return Result::kFull;
  value.append(tail);
  return set(key, std::move(value));
}

KeySpace::Result KeySpace::compare_set(const std::string& key, const std::string& expected,
                                       std::string desired, std::string* out, bool* changed) {
  *changed = false;
  const std::string* current = find(key);
  if (current == nullptr && !expected.empty()) {
    *out = expected;
    return Result::kOk;
  }
  if (current != nullptr && *current != expected) {
    *out = *current;
    return Result::kOk;
  }
  *out = desired;
  Result r = set(key, std::move(desired));
  *changed = r == Result::kOk;
  return r;
}

bool KeySpace::erase(const std::string& key) {
  auto it = map_.find(key);
  if (it == map_.end()) return false;
  std::size_t c = cost(it->first, it->second);
  budget_->change(c, 0);
  memory_ -= c;
  map_.erase(it);
  return true;
}

void KeySpace::clear() {
  budget_->change(memory_, 0);
  memory_ = 0;
  std::unordered_map<std::string, std::string>().swap(map_);
}

std::string_view KeySpace::why(Result r) {
  switch (r) {
    case Result::kOk:
      return "ok";
    case Result::kTooManyKeys:
      return "the key space holds kMaxKeys keys";
    case Result::kFull:
      return "the server's memory cap would be passed (kDefaultMaxMemoryBytes, mlrun rdzv "
             "--max-memory; "
             "docs/protocol.md), or a value kMaxValueBytes";
    case Result::kNotInteger:
      return "ADD on a key whose value is not a decimal integer";
    case Result::kOverflow:
      return "ADD overflows int64";
  }
  return "?";
}

}  // namespace mlrun::rendezvous::torch
