// The protocol's field codec, shared by its source files (internal): protocol.cc (headers and
// requests) and protocol_reply.cc (replies).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "rendezvous/protocol.h"

namespace mlrun::rendezvous::proto {

// Fields are little-endian integers and strings as u32 length + bytes. The reader checks every
// length against both its limit and the bytes left before it allocates.
class Writer {
 public:
  void u8(std::uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void u32(std::uint32_t v) { le(v); }
  void i32(std::int32_t v) { le(static_cast<std::uint32_t>(v)); }
  void u64(std::uint64_t v) { le(v); }
  void i64(std::int64_t v) { le(static_cast<std::uint64_t>(v)); }
  void str(std::string_view s) {
    u32(static_cast<std::uint32_t>(s.size()));
    out_.append(s);
  }
  std::string take() { return std::move(out_); }

 private:
  template <typename T>
  void le(T v) {
    for (std::size_t i = 0; i < sizeof(T); ++i) out_.push_back(static_cast<char>(v >> (8 * i)));
  }
  std::string out_;
};

class Reader {
 public:
  explicit Reader(std::span<const std::uint8_t> bytes) : bytes_(bytes) {}
  bool u8(std::uint8_t& v) {
    if (left() < 1) return fail(Status::kBadFrame, "payload ends inside a field");
    v = bytes_[pos_++];
    return true;
  }
  bool u32(std::uint32_t& v) { return le(v); }
  bool i32(std::int32_t& v) {
    std::uint32_t u;
    if (!le(u)) return false;
    v = static_cast<std::int32_t>(u);
    return true;
  }
  bool u64(std::uint64_t& v) { return le(v); }
  bool i64(std::int64_t& v) {
    std::uint64_t u;
    if (!le(u)) return false;
    v = static_cast<std::int64_t>(u);
    return true;
  }
  bool str(std::string& s, std::size_t limit, std::string_view too_long) {
    std::uint32_t n;
    if (!u32(n)) return false;
    if (n > limit) return fail(Status::kLimitExceeded, too_long);
    if (n > left()) return fail(Status::kBadFrame, "string length runs past the payload");
    s.assign(reinterpret_cast<const char*>(bytes_.data() + pos_), n);
    pos_ += n;
    return true;
  }
  bool end() {
    if (left() != 0) return fail(Status::kBadFrame, "trailing bytes after the last field");
    return true;
  }
  bool fail(Status status, std::string_view what) {
    if (error_ == Status::kOk) {
      error_ = status;
      what_ = what;
    }
    return false;
  }
  std::size_t left() const { return bytes_.size() - pos_; }
  Status error() const { return error_; }
  std::string_view what() const { return what_; }

 private:
  template <typename T>
  bool le(T& v) {
    if (left() < sizeof(T)) return fail(Status::kBadFrame, "payload ends inside a field");
    v = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(bytes_[pos_ + i]) << (8 * i);
    pos_ += sizeof(T);
    return true;
  }
  std::span<const std::uint8_t> bytes_;
  std::size_t pos_ = 0;
  Status error_ = Status::kOk;
  std::string_view what_;
};

/// A whole frame: the header for op, status and request_id, then payload.
std::string frame(std::uint8_t op, Status status, std::uint32_t request_id, std::string payload);

}  // namespace mlrun::rendezvous::proto
