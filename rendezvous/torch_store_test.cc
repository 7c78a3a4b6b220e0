// The TCPStore decoder and key space on recorded byte streams and on malformed input.
#include "rendezvous/torch_store.h"

#include <fstream>

#include <gtest/gtest.h>

#include "rendezvous/torch_space.h"
#include "rendezvous/torch_store_test_util.h"

namespace mlrun::rendezvous::torch {
namespace {

using testing::Chunk;
using testing::load_session;

std::span<const std::uint8_t> span_of(const std::string& s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

std::string u64(std::uint64_t v) {
  std::string s;
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>(v >> (8 * i)));
  return s;
}

Decoded decode_text(Dialect d, const std::string& bytes, Request& r) {
  return decode(d, span_of(bytes), r);
}

TEST(TorchStore, DialectFromFirstBytes) {
  EXPECT_EQ(detect(span_of("MLRZ")), Dialect::kMlrun);
  EXPECT_EQ(detect(span_of(std::string("\x00\xce\xf7\x85\x3c", 5))), Dialect::kTorch2);
  EXPECT_EQ(detect(span_of(std::string("\x00\xce\xf7", 3))), Dialect::kUnknown);
  // A 1.13 SET: 00 and a key length.
  EXPECT_EQ(detect(span_of(std::string("\x00\x05", 2))), Dialect::kTorch113);
  EXPECT_EQ(detect(span_of(std::string("\x03", 1))), Dialect::kTorch113);
  EXPECT_EQ(detect(span_of(std::string("\x09", 1))), Dialect::kInvalid);
  EXPECT_EQ(detect(span_of("GET / HTTP/1.1")), Dialect::kInvalid);
  EXPECT_EQ(detect({}), Dialect::kUnknown);
}

// Every request a real client sent (recorded by tests/rendezvous/torch_store_proxy.py) decodes
// whole from the stream, and any prefix of it asks for more rather than decoding.
void decode_recorded(const char* file, Dialect d, std::size_t expected_requests) {
  std::vector<Chunk> chunks = load_session(file);
  ASSERT_FALSE(chunks.empty()) << file;
  std::string stream;
  for (const auto& c : chunks) {
    if (c.from_client) stream += c.bytes;
  }
  std::size_t at = 0, requests = 0;
  while (at < stream.size()) {
    Request r;
    std::string rest = stream.substr(at);
    Decoded whole = decode_text(d, rest, r);
    ASSERT_EQ(whole.status, DecodeStatus::kOk) << file << " at byte " << at;
    for (std::size_t cut = 0; cut < whole.bytes; cut += 7) {
      Request p;
      Decoded part = decode_text(d, rest.substr(0, cut), p);
      ASSERT_EQ(part.status, DecodeStatus::kNeedMore) << file << " at " << at << " cut " << cut;
      ASSERT_GT(part.bytes, cut);
      ASSERT_LE(part.bytes, whole.bytes);
    }
    // Encoding what was decoded gives the same bytes back.
    EXPECT_EQ(encode(d, r), rest.substr(0, whole.bytes)) << op_name(r.op);
    at += whole.bytes;
    ++requests;
  }
  EXPECT_EQ(requests, expected_requests) << file;
}

TEST(TorchStore, RecordedTorch113ClientStreamDecodes) {
  decode_recorded("torch113_one_client.txt", Dialect::kTorch113, 16);
}

TEST(TorchStore, RecordedTorch26ClientStreamDecodes) {
  decode_recorded("torch26_one_client.txt", Dialect::kTorch2, 27);
}

TEST(TorchStore, LengthsPastTheirLimitsFailAtOnce) {
  Request r;
  const std::string max = u64(~std::uint64_t{0});
  // 1.13 GET with a 2^64-1 key length: an error with no more bytes, not a wait for 16 EiB.
  EXPECT_EQ(decode_text(Dialect::kTorch113, std::string("\x02", 1) + max, r).status,
            DecodeStatus::kError);
  // SET whose value length is 2^64-1.
  std::string set = std::string("\x01", 1) + u64(1) + "k" + max;
  EXPECT_EQ(decode_text(Dialect::kTorch2, set, r).status, DecodeStatus::kError);
  // WAIT naming 2^64-1 keys, and one naming kMaxKeys + 1.
  EXPECT_EQ(decode_text(Dialect::kTorch2, std::string("\x06", 1) + max, r).status,
            DecodeStatus::kError);
  EXPECT_EQ(decode_text(Dialect::kTorch2, std::string("\x06", 1) + u64(kMaxKeys + 1), r).status,
            DecodeStatus::kError);
  // A key one byte over kMaxKeyBytes; one at the limit only needs its bytes.
  Decoded over = decode_text(Dialect::kTorch113, std::string("\x02", 1) + u64(kMaxKeyBytes + 1), r);
  EXPECT_EQ(over.status, DecodeStatus::kError);
  EXPECT_NE(over.what.find("kMaxKeyBytes"), std::string_view::npos);
  Decoded at = decode_text(Dialect::kTorch113, std::string("\x02", 1) + u64(kMaxKeyBytes), r);
  EXPECT_EQ(at.status, DecodeStatus::kNeedMore);
  EXPECT_EQ(at.bytes, 1 + 8 + kMaxKeyBytes);
  // MULTI_SET whose values together pass kMaxRequestBytes: refused at the length that passes
  // it, before that value's bytes arrive.
  std::string multi = std::string("\x0b", 1) + u64(3);
  multi += u64(1) + "a" + u64(kMaxValueBytes) + std::string(kMaxValueBytes, 'x');
  multi += u64(1) + "b" + u64(kMaxValueBytes);
  Decoded big = decode_text(Dialect::kTorch2, multi, r);
  EXPECT_EQ(big.status, DecodeStatus::kError);
  EXPECT_NE(big.what.find("kMaxRequestBytes"), std::string_view::npos);
}

TEST(TorchStore, TruncatedRequestsNeedMoreAndUnknownOpcodesFail) {
  Request r;
  // A truncated length field, then a truncated key.
  Decoded d = decode_text(Dialect::kTorch113, std::string("\x02\x05\x00", 3), r);
  EXPECT_EQ(d.status, DecodeStatus::kNeedMore);
  EXPECT_EQ(d.bytes, 9u);
  d = decode_text(Dialect::kTorch113, std::string("\x02", 1) + u64(5) + "ab", r);
  EXPECT_EQ(d.bytes, 14u);
  EXPECT_EQ(decode_text(Dialect::kTorch113, std::string("\x09", 1), r).status,
            DecodeStatus::kError);
  EXPECT_EQ(decode_text(Dialect::kTorch2, std::string("\x0e", 1), r).status, DecodeStatus::kError);
  EXPECT_EQ(decode_text(Dialect::kTorch2, std::string("\xff", 1), r).status, DecodeStatus::kError);
  EXPECT_EQ(decode_text(Dialect::kMlrun, std::string("\x01", 1), r).status, DecodeStatus::kError);
  // A WAIT of zero keys is no request a client sends.
  EXPECT_EQ(decode_text(Dialect::kTorch2, std::string("\x06", 1) + u64(0), r).status,
            DecodeStatus::kError);
  EXPECT_EQ(decode_text(Dialect::kTorch2, "", r).status, DecodeStatus::kNeedMore);
}

TEST(TorchKeySpace, PyTorchSemanticsAndRealMemoryAccounting) {
  KeySpace s;
  std::string out;
  bool changed = false;
  // compare_set on a missing key: empty expected creates, anything else answers `expected`.
  EXPECT_EQ(s.compare_set("k", "x", "y", &out, &changed), KeySpace::Result::kOk);
  EXPECT_EQ(out, "x");
  EXPECT_FALSE(changed);
  EXPECT_FALSE(s.contains("k"));
  s.compare_set("k", "", "y", &out, &changed);
  EXPECT_EQ(out, "y");
  EXPECT_TRUE(changed);
  s.compare_set("k", "nope", "z", &out, &changed);
  EXPECT_EQ(out, "y");
  std::int64_t sum = 0;
  EXPECT_EQ(s.add("n", 5, &sum), KeySpace::Result::kOk);
  EXPECT_EQ(s.add("n", -7, &sum), KeySpace::Result::kOk);
  EXPECT_EQ(sum, -2);
  EXPECT_EQ(s.add("k", 1, &sum), KeySpace::Result::kNotInteger);
  s.set("max", std::to_string(INT64_MAX));
  EXPECT_EQ(s.add("max", 1, &sum), KeySpace::Result::kOverflow);
  EXPECT_EQ(s.append("log", "ab"), KeySpace::Result::kOk);
  EXPECT_EQ(s.append("log", "cd"), KeySpace::Result::kOk);
  EXPECT_EQ(*s.find("log"), "abcd");
  // Memory counts each entry's overhead, not just its bytes, and returns to 0.
  EXPECT_GT(s.memory(), 4 * 64u);
  for (const char* k : {"k", "n", "max", "log"}) EXPECT_TRUE(s.erase(k));
  EXPECT_EQ(s.memory(), 0u);
  EXPECT_EQ(s.size(), 0u);
}

TEST(TorchKeySpace, CapsOnKeysAndMemory) {
  KeySpace small(64 * 1024);
  EXPECT_EQ(small.set("a", std::string(40 * 1024, 'x')), KeySpace::Result::kOk);
  EXPECT_EQ(small.set("b", std::string(40 * 1024, 'x')), KeySpace::Result::kFull);
  // Replacing a value frees the old one first.
  EXPECT_EQ(small.set("a", std::string(50 * 1024, 'y')), KeySpace::Result::kOk);
  // Many small keys cost their entries: 64 KiB holds far fewer than 64 Ki one-byte values.
  KeySpace tiny(64 * 1024);
  std::size_t n = 0;
  while (tiny.set(std::to_string(n), "v") == KeySpace::Result::kOk) ++n;
  EXPECT_LT(n, 1024u);
  KeySpace many;
  for (std::size_t i = 0; i < kMaxKeys; ++i) {
    ASSERT_EQ(many.set(std::to_string(i), ""), KeySpace::Result::kOk);
  }
  EXPECT_EQ(many.set("one more", ""), KeySpace::Result::kTooManyKeys);
  EXPECT_EQ(many.set("0", "an existing key may change"), KeySpace::Result::kOk);
}

}  // namespace
}  // namespace mlrun::rendezvous::torch
