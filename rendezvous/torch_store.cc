#include "rendezvous/torch_store.h"

#include <algorithm>
#include <array>
#include <cstring>

namespace mlrun::rendezvous::torch {
namespace {

constexpr std::uint8_t kMlrunFirstByte = 'M';  // "MLRZ", docs/protocol.md

// Opcodes by dialect (PyTorch's QueryType enums). 1.13 has no VALIDATE; 2.x dropped WATCH_KEY.
constexpr std::array<Op, 9> kOps113 = {Op::kSet,        Op::kCompareSet, Op::kGet,
                                       Op::kAdd,        Op::kCheck,      Op::kWait,
                                       Op::kGetNumKeys, Op::kWatchKey,   Op::kDeleteKey};
constexpr std::array<Op, 14> kOps2 = {
    Op::kValidate, Op::kSet,      Op::kCompareSet, Op::kGet,       Op::kAdd,
    Op::kCheck,    Op::kWait,     Op::kGetNumKeys, Op::kDeleteKey, Op::kAppend,
    Op::kMultiGet, Op::kMultiSet, Op::kCancelWait, Op::kPing};

// Reads little-endian fields from a request that may be cut short anywhere. A field past the
// end records how many bytes the request needs at least; a length past its limit is an error
// at once. With copy false nothing is allocated: the caller first checks the request is whole.
class Cursor {
 public:
  Cursor(std::span<const std::uint8_t> bytes, bool copy) : bytes_(bytes), copy_(copy) {}

  bool u8(std::uint8_t& v) { return le(v); }
  bool u32(std::uint32_t& v) { return le(v); }
  bool i64(std::int64_t& v) {
    std::uint64_t u = 0;
    if (!le(u)) return false;
    v = static_cast<std::int64_t>(u);
    return true;
  }
  // A u64 count of keys, checked against kMaxKeys.
  bool count(std::size_t& n) {
    std::uint64_t v = 0;
    if (!le(v)) return false;
    if (v == 0) return fail("a key count of 0");
    if (v > kMaxKeys) return fail("more keys than kMaxKeys in one request");
    n = static_cast<std::size_t>(v);
    return true;
  }
  // u64 length + bytes; appended to *out when copying.
  bool str(std::vector<std::string>& out, std::size_t limit, std::string_view too_long) {
    std::uint64_t n = 0;
    if (!le(n)) return false;
    if (n > limit) return fail(too_long);
    request_bytes_ += n;
    if (request_bytes_ > kMaxRequestBytes) return fail("a request larger than kMaxRequestBytes");
    if (bytes_.size() - pos_ < n) return need(pos_ + n);
    if (copy_) out.emplace_back(reinterpret_cast<const char*>(bytes_.data() + pos_), n);
    pos_ += n;
    return true;
  }
  bool key(std::vector<std::string>& out) {
    return str(out, kMaxKeyBytes, "a key longer than kMaxKeyBytes");
  }
  bool value(std::vector<std::string>& out) {
    return str(out, kMaxValueBytes, "a value longer than kMaxValueBytes");
  }
  bool fail(std::string_view what) {
    result_ = {DecodeStatus::kError, 0, what};
    return false;
  }
  Decoded done() {
    if (result_.status == DecodeStatus::kNeedMore && result_.bytes == 0) {
      result_ = {DecodeStatus::kOk, pos_, {}};
    }
    return result_;
  }

 private:
  bool need(std::size_t total) {
    result_ = {DecodeStatus::kNeedMore, total, {}};
    return false;
  }
  template <typename T>
  bool le(T& v) {
    if (bytes_.size() - pos_ < sizeof(T)) return need(pos_ + sizeof(T));
    v = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(bytes_[pos_ + i]) << (8 * i);
    pos_ += sizeof(T);
    return true;
  }

  std::span<const std::uint8_t> bytes_;
  bool copy_;
  std::size_t pos_ = 0;
  std::size_t request_bytes_ = 0;
  Decoded result_{DecodeStatus::kNeedMore, 0, {}};
};

// The arguments of op, after its opcode byte.
bool arguments(Cursor& in, Request& r) {
  std::size_t n = 0;
  switch (r.op) {
    case Op::kValidate:
    case Op::kPing:
      return in.u32(r.word);
    case Op::kSet:
    case Op::kAppend:
      return in.key(r.keys) && in.value(r.values);
    case Op::kCompareSet:
      return in.key(r.keys) && in.value(r.values) && in.value(r.values);
    case Op::kGet:
    case Op::kWatchKey:
    case Op::kDeleteKey:
      return in.key(r.keys);
    case Op::kAdd:
      return in.key(r.keys) && in.i64(r.delta);
    case Op::kCheck:
    case Op::kWait:
    case Op::kMultiGet:
      if (!in.count(n)) return false;
      for (std::size_t i = 0; i < n; ++i) {
        if (!in.key(r.keys)) return false;
      }
      return true;
    case Op::kMultiSet:
      if (!in.count(n)) return false;
      for (std::size_t i = 0; i < n; ++i) {
        if (!in.key(r.keys) || !in.value(r.values)) return false;
      }
      return true;
    case Op::kGetNumKeys:
    case Op::kCancelWait:
      return true;
  }
  return in.fail("unknown operation");
}

Decoded decode_pass(Dialect d, std::span<const std::uint8_t> bytes, Request& out, bool copy) {
  Cursor in(bytes, copy);
  std::uint8_t code = 0;
  if (!in.u8(code)) return in.done();
  if (d == Dialect::kTorch113 && code < kOps113.size()) {
    out.op = kOps113[code];
  } else if (d == Dialect::kTorch2 && code < kOps2.size()) {
    out.op = kOps2[code];
  } else {
    in.fail(d == Dialect::kTorch113 || d == Dialect::kTorch2 ? "unknown opcode"
                                                             : "not a TCPStore dialect");
    return in.done();
  }
  arguments(in, out);
  return in.done();
}

template <typename T>
void append_le(std::string& out, T v) {
  for (std::size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>(v >> (8 * i)));
}

}  // namespace

std::string_view dialect_name(Dialect d) {
  switch (d) {
    case Dialect::kUnknown:
      return "unknown";
    case Dialect::kMlrun:
      return "mlrun";
    case Dialect::kTorch113:
      return "torch 1.13 TCPStore";
    case Dialect::kTorch2:
      return "torch 2.x TCPStore";
    case Dialect::kInvalid:
      return "invalid";
  }
  return "?";
}

Dialect detect(std::span<const std::uint8_t> first) {
  if (first.empty()) return Dialect::kUnknown;
  if (first[0] == kMlrunFirstByte) return Dialect::kMlrun;
  if (first[0] >= kOps113.size()) return Dialect::kInvalid;
  if (first[0] != 0) return Dialect::kTorch113;
  // 00: torch 2.x's VALIDATE, or a torch 1.13 SET whose key length starts there.
  static constexpr std::uint8_t kValidate[5] = {0x00, 0xce, 0xf7, 0x85, 0x3c};
  std::size_t have = std::min<std::size_t>(first.size(), 5);
  if (std::memcmp(first.data(), kValidate, have) != 0) return Dialect::kTorch113;
  return have == 5 ? Dialect::kTorch2 : Dialect::kUnknown;
}

std::string_view op_name(Op op) {
  switch (op) {
    case Op::kValidate:
      return "VALIDATE";
    case Op::kSet:
      return "SET";
    case Op::kCompareSet:
      return "COMPARE_SET";
    case Op::kGet:
      return "GET";
    case Op::kAdd:
      return "ADD";
    case Op::kCheck:
      return "CHECK";
    case Op::kWait:
      return "WAIT";
    case Op::kGetNumKeys:
      return "GETNUMKEYS";
    case Op::kWatchKey:
      return "WATCH_KEY";
    case Op::kDeleteKey:
      return "DELETE_KEY";
    case Op::kAppend:
      return "APPEND";
    case Op::kMultiGet:
      return "MULTI_GET";
    case Op::kMultiSet:
      return "MULTI_SET";
    case Op::kCancelWait:
      return "CANCEL_WAIT";
    case Op::kPing:
      return "PING";
  }
  return "?";
}

Decoded decode(Dialect d, std::span<const std::uint8_t> bytes, Request& out) {
  // First walk the lengths only; copy the strings once the request is whole. A request that
  // arrives in pieces is walked again per piece, which touches its length fields, not its data.
  Request scratch;
  Decoded r = decode_pass(d, bytes, scratch, false);
  if (r.status != DecodeStatus::kOk) return r;
  out = Request{};
  return decode_pass(d, bytes.first(r.bytes), out, true);
}

void append_u8(std::string& out, std::uint8_t v) {
  out.push_back(static_cast<char>(v));
}
void append_u32(std::string& out, std::uint32_t v) {
  append_le(out, v);
}
void append_i64(std::string& out, std::int64_t v) {
  append_le(out, static_cast<std::uint64_t>(v));
}
void append_bytes(std::string& out, std::string_view v) {
  append_le(out, static_cast<std::uint64_t>(v.size()));
  out.append(v);
}

std::string encode(Dialect d, const Request& r) {
  std::string out;
  const Op* begin = d == Dialect::kTorch113 ? kOps113.data() : kOps2.data();
  const Op* end =
      d == Dialect::kTorch113 ? kOps113.data() + kOps113.size() : kOps2.data() + kOps2.size();
  const Op* at = std::find(begin, end, r.op);
  append_u8(out, static_cast<std::uint8_t>(at == end ? 0xff : at - begin));
  auto key = [&](std::size_t i) { append_bytes(out, i < r.keys.size() ? r.keys[i] : ""); };
  auto value = [&](std::size_t i) { append_bytes(out, i < r.values.size() ? r.values[i] : ""); };
  switch (r.op) {
    case Op::kValidate:
    case Op::kPing:
      append_u32(out, r.word);
      break;
    case Op::kSet:
    case Op::kAppend:
      key(0);
      value(0);
      break;
    case Op::kCompareSet:
      key(0);
      value(0);
      value(1);
      break;
    case Op::kGet:
    case Op::kWatchKey:
    case Op::kDeleteKey:
      key(0);
      break;
    case Op::kAdd:
      key(0);
      append_i64(out, r.delta);
      break;
    case Op::kCheck:
    case Op::kWait:
    case Op::kMultiGet:
    case Op::kMultiSet:
      append_i64(out, static_cast<std::int64_t>(r.keys.size()));
      for (std::size_t i = 0; i < r.keys.size(); ++i) {
        key(i);
        if (r.op == Op::kMultiSet) value(i);
      }
      break;
    case Op::kGetNumKeys:
    case Op::kCancelWait:
      break;
  }
  return out;
}

}  // namespace mlrun::rendezvous::torch
