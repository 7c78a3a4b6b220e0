#include "rendezvous/protocol.h"

#include <random>

#include <gtest/gtest.h>

namespace mlrun::rendezvous::proto {
namespace {

std::span<const std::uint8_t> bytes_of(const std::string& s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

// Decodes a whole frame and parses it as a request; fails the test when either step fails.
Request round_trip(const Request& in, std::uint32_t id = 7) {
  std::string wire = encode_request(id, in);
  Header h;
  std::span<const std::uint8_t> payload;
  DecodeResult r = decode_frame(bytes_of(wire), h, payload, kMaxPayloadBytes);
  EXPECT_EQ(r.status, DecodeStatus::kOk);
  EXPECT_EQ(r.consumed, wire.size());
  EXPECT_EQ(h.request_id, id);
  EXPECT_EQ(h.op, static_cast<std::uint8_t>(op_of(in)));
  Request out;
  Status status = Status::kOk;
  std::string_view what;
  EXPECT_TRUE(parse_request(h.op, payload, out, &status, &what)) << what;
  return out;
}

// The status parse_request gives a request's payload.
Status parse_status(std::uint8_t op, const std::string& payload) {
  Request out;
  Status status = Status::kOk;
  std::string_view what;
  if (parse_request(op, bytes_of(payload), out, &status, &what)) return Status::kOk;
  EXPECT_FALSE(what.empty());
  return status;
}

Status parse_status(const Request& in) {
  std::string wire = encode_request(1, in);
  return parse_status(static_cast<std::uint8_t>(op_of(in)), wire.substr(kHeaderBytes));
}

std::string le32(std::uint32_t v) {
  std::string s(4, '\0');
  for (int i = 0; i < 4; ++i) s[i] = static_cast<char>(v >> (8 * i));
  return s;
}

TEST(Protocol, HeaderLayoutIsLittleEndian) {
  std::string wire = encode_request(0x01020304, Heartbeat{});
  ASSERT_EQ(wire.size(), kHeaderBytes);
  EXPECT_EQ(wire.substr(0, 4), "MLRZ");
  EXPECT_EQ(wire[4], static_cast<char>(kVersion));
  EXPECT_EQ(wire[5], static_cast<char>(Op::kHeartbeat));
  EXPECT_EQ(wire.substr(8, 4), std::string("\x04\x03\x02\x01", 4));
  EXPECT_EQ(wire.substr(12, 4), std::string(4, '\0'));
}

TEST(Protocol, EveryRequestRoundTrips) {
  auto hello = std::get<Hello>(round_trip(Hello{"secret", "job-1"}));
  EXPECT_EQ(hello.token, "secret");
  EXPECT_EQ(hello.job_id, "job-1");

  auto join = std::get<Join>(round_trip(Join{"g", 4, 2, 8, 1234}));
  EXPECT_EQ(join.group, "g");
  EXPECT_EQ(join.size, 4u);
  EXPECT_EQ(join.index, 2);
  EXPECT_EQ(join.weight, 8u);
  EXPECT_EQ(join.timeout_ms, 1234u);
  EXPECT_EQ(std::get<Join>(round_trip(Join{"g", 4, -1, 1, 0})).index, -1);

  std::string binary("\0\xff\x01zz", 5);
  auto set = std::get<Set>(round_trip(Set{binary, binary + binary}));
  EXPECT_EQ(set.key, binary);
  EXPECT_EQ(set.value, binary + binary);

  auto get = std::get<Get>(round_trip(Get{"k", 99}));
  EXPECT_EQ(get.key, "k");
  EXPECT_EQ(get.timeout_ms, 99u);

  auto add = std::get<Add>(round_trip(Add{"n", -5}));
  EXPECT_EQ(add.delta, -5);
  EXPECT_EQ(std::get<Add>(round_trip(Add{"n", INT64_MIN})).delta, INT64_MIN);

  auto cas = std::get<CompareSet>(round_trip(CompareSet{"k", "", "new"}));
  EXPECT_EQ(cas.expected, "");
  EXPECT_EQ(cas.desired, "new");

  auto wait = std::get<Wait>(round_trip(Wait{{"a", "", "c"}, 5}));
  EXPECT_EQ(wait.keys, (std::vector<std::string>{"a", "", "c"}));
  EXPECT_EQ(wait.timeout_ms, 5u);
  EXPECT_TRUE(std::get<Wait>(round_trip(Wait{{}, 0})).keys.empty());

  EXPECT_EQ(std::get<Delete>(round_trip(Delete{"gone"})).key, "gone");
  auto barrier = std::get<Barrier>(round_trip(Barrier{"b", 64, 10}));
  EXPECT_EQ(barrier.name, "b");
  EXPECT_EQ(barrier.count, 64u);
  EXPECT_TRUE(std::holds_alternative<Heartbeat>(round_trip(Heartbeat{})));
  EXPECT_EQ(std::get<Abort>(round_trip(Abort{"rank 3 failed"})).reason, "rank 3 failed");
  auto beat = std::get<NodeHeartbeat>(round_trip(NodeHeartbeat{"node 1 (h)", 300}));
  EXPECT_EQ(beat.who, "node 1 (h)");
  EXPECT_EQ(beat.timeout_ms, 300u);
  EXPECT_EQ(std::get<NodeWatch>(round_trip(NodeWatch{1})).close_is_loss, 1);
  EXPECT_EQ(std::get<NodeWatch>(round_trip(NodeWatch{0})).close_is_loss, 0);
}

template <typename Body>
Body reply_round_trip(Op op, const Body& in) {
  std::string wire = encode_reply(op, 42, in);
  Header h;
  std::span<const std::uint8_t> payload;
  EXPECT_EQ(decode_frame(bytes_of(wire), h, payload, kMaxPayloadBytes).status, DecodeStatus::kOk);
  EXPECT_EQ(h.op, static_cast<std::uint8_t>(op) | kReplyBit);
  EXPECT_EQ(h.status, Status::kOk);
  EXPECT_EQ(h.request_id, 42u);
  Body out;
  EXPECT_TRUE(parse_reply(payload, out));
  return out;
}

TEST(Protocol, EveryReplyRoundTrips) {
  EXPECT_EQ(reply_round_trip(Op::kHello, HelloReply{}).server_version, kVersion);
  auto join = reply_round_trip(Op::kJoin, JoinReply{3, 4, 24, 32});
  EXPECT_EQ(join.index, 3u);
  EXPECT_EQ(join.size, 4u);
  EXPECT_EQ(join.offset, 24u);
  EXPECT_EQ(join.total, 32u);
  EXPECT_EQ(reply_round_trip(Op::kGet, ValueReply{std::string(128, '\x7f')}).value,
            std::string(128, '\x7f'));
  EXPECT_EQ(reply_round_trip(Op::kAdd, AddReply{-3}).value, -3);
  auto cas = reply_round_trip(Op::kCompareSet, CompareSetReply{true, "v"});
  EXPECT_TRUE(cas.swapped);
  EXPECT_EQ(cas.value, "v");
  EXPECT_TRUE(reply_round_trip(Op::kDelete, DeleteReply{true}).existed);
  reply_round_trip(Op::kSet, EmptyReply{});
}

TEST(Protocol, ErrorReplyCarriesStatusAndCutMessage) {
  std::string wire = encode_error(200, 9, Status::kTimeout, std::string(10000, 'm'));
  Header h;
  std::span<const std::uint8_t> payload;
  ASSERT_EQ(decode_frame(bytes_of(wire), h, payload, kMaxPayloadBytes).status, DecodeStatus::kOk);
  EXPECT_EQ(h.status, Status::kTimeout);
  EXPECT_EQ(h.op, 200 | kReplyBit);
  EXPECT_EQ(error_message(payload), std::string(kMaxMessageBytes, 'm'));
}

TEST(Protocol, EveryPrefixOfAFrameNeedsMore) {
  std::string wire = encode_request(1, Set{"key", "value"});
  for (std::size_t n = 0; n < wire.size(); ++n) {
    Header h;
    std::span<const std::uint8_t> payload;
    DecodeResult r = decode_frame(bytes_of(wire.substr(0, n)), h, payload, kMaxPayloadBytes);
    EXPECT_EQ(r.status, DecodeStatus::kNeedMore) << "prefix of " << n << " bytes";
  }
  // Two frames back to back: the first is decoded alone.
  std::string two = wire + encode_request(2, Heartbeat{});
  Header h;
  std::span<const std::uint8_t> payload;
  DecodeResult r = decode_frame(bytes_of(two), h, payload, kMaxPayloadBytes);
  EXPECT_EQ(r.status, DecodeStatus::kOk);
  EXPECT_EQ(r.consumed, wire.size());
}

TEST(Protocol, BadMagicIsRefusedFromTheFirstByte) {
  Header h;
  std::span<const std::uint8_t> payload;
  for (std::string garbage : {std::string("G"), std::string("GET / HTTP/1.1\r\n"),
                              std::string("MLRX"), std::string(16, '\0')}) {
    DecodeResult r = decode_frame(bytes_of(garbage), h, payload, kMaxPayloadBytes);
    EXPECT_EQ(r.status, DecodeStatus::kError) << garbage;
    EXPECT_EQ(r.error, Status::kBadFrame);
  }
}

TEST(Protocol, WrongVersionAndOversizedPayloadAreRefused) {
  std::string wire = encode_request(1, Heartbeat{});
  Header h;
  std::span<const std::uint8_t> payload;
  std::string v2 = wire;
  v2[4] = 2;
  EXPECT_EQ(decode_frame(bytes_of(v2), h, payload, kMaxPayloadBytes).error,
            Status::kUnsupportedVersion);

  std::string huge = wire.substr(0, 12) + le32(0xffffffffu);
  DecodeResult r = decode_header(bytes_of(huge), h, kMaxPayloadBytes);
  EXPECT_EQ(r.status, DecodeStatus::kError);
  EXPECT_EQ(r.error, Status::kLimitExceeded);

  // Before authentication the limit is the small one.
  std::string big_hello =
      encode_request(1, Hello{std::string(kMaxTokenBytes, 't'), std::string(kMaxJobIdBytes, 'j')});
  ASSERT_GT(big_hello.size() - kHeaderBytes, 0u);
  std::string over = wire.substr(0, 12) + le32(kMaxHelloPayloadBytes + 1);
  EXPECT_EQ(decode_header(bytes_of(over), h, kMaxHelloPayloadBytes).error, Status::kLimitExceeded);
  EXPECT_LE(big_hello.size() - kHeaderBytes, kMaxHelloPayloadBytes)
      << "a HELLO at its limits must fit the pre-authentication frame limit";
}

TEST(Protocol, EveryNamedLimitIsEnforced) {
  const std::string long_key(kMaxKeyBytes + 1, 'k');
  EXPECT_EQ(parse_status(Hello{std::string(kMaxTokenBytes + 1, 't'), ""}), Status::kLimitExceeded);
  EXPECT_EQ(parse_status(Hello{"t", std::string(kMaxJobIdBytes + 1, 'j')}), Status::kLimitExceeded);
  EXPECT_EQ(parse_status(Set{long_key, "v"}), Status::kLimitExceeded);
  EXPECT_EQ(parse_status(Set{std::string(kMaxKeyBytes, 'k'), "v"}), Status::kOk);
  EXPECT_EQ(parse_status(Set{"k", std::string(kMaxValueBytes + 1, 'v')}), Status::kLimitExceeded);
  EXPECT_EQ(parse_status(Get{long_key, 1}), Status::kLimitExceeded);
  EXPECT_EQ(parse_status(Add{long_key, 1}), Status::kLimitExceeded);
  EXPECT_EQ(parse_status(CompareSet{long_key, "", ""}), Status::kLimitExceeded);
  EXPECT_EQ(parse_status(Delete{long_key}), Status::kLimitExceeded);
  EXPECT_EQ(parse_status(Wait{{"a", long_key}, 1}), Status::kLimitExceeded);
  EXPECT_EQ(parse_status(Barrier{long_key, 2, 1}), Status::kLimitExceeded);
  EXPECT_EQ(parse_status(Barrier{"b", 0, 1}), Status::kLimitExceeded);
  EXPECT_EQ(parse_status(Barrier{"b", kMaxGroupSize + 1, 1}), Status::kLimitExceeded);
  EXPECT_EQ(parse_status(Join{long_key, 2, -1, 1, 1}), Status::kLimitExceeded);
  EXPECT_EQ(parse_status(Join{"g", 0, -1, 1, 1}), Status::kLimitExceeded);
  EXPECT_EQ(parse_status(Join{"g", kMaxGroupSize + 1, -1, 1, 1}), Status::kLimitExceeded);
  EXPECT_EQ(parse_status(Join{"g", 2, -1, kMaxJoinWeight + 1, 1}), Status::kLimitExceeded);
  EXPECT_EQ(parse_status(Join{"g", 2, 2, 1, 1}), Status::kInvalidArgument);
  EXPECT_EQ(parse_status(Join{"g", 2, -2, 1, 1}), Status::kInvalidArgument);
  EXPECT_EQ(parse_status(Abort{std::string(kMaxMessageBytes + 1, 'r')}), Status::kLimitExceeded);

  // A key count over the limit is refused before any key is read or any vector sized.
  constexpr auto wait = static_cast<std::uint8_t>(Op::kWait);
  EXPECT_EQ(parse_status(wait, le32(kMaxKeysPerWait + 1)), Status::kLimitExceeded);
  // A count under the limit that the payload cannot hold.
  EXPECT_EQ(parse_status(wait, le32(kMaxKeysPerWait)), Status::kBadFrame);
}

TEST(Protocol, MalformedPayloadsAreBadFrames) {
  constexpr auto set = static_cast<std::uint8_t>(Op::kSet);
  EXPECT_EQ(parse_status(set, ""), Status::kBadFrame);              // no fields
  EXPECT_EQ(parse_status(set, le32(3) + "ab"), Status::kBadFrame);  // string cut short
  EXPECT_EQ(parse_status(set, le32(1) + "a" + le32(0) + "x"), Status::kBadFrame);  // trailing
  EXPECT_EQ(parse_status(set, le32(1) + "a"), Status::kBadFrame);                  // missing value
  EXPECT_EQ(parse_status(static_cast<std::uint8_t>(Op::kHeartbeat), "x"), Status::kBadFrame);
  EXPECT_EQ(parse_status(0, ""), Status::kBadFrame);   // op 0
  EXPECT_EQ(parse_status(99, ""), Status::kBadFrame);  // unknown op
  EXPECT_FALSE(is_known_op(0));
  EXPECT_FALSE(is_known_op(16));
  const auto watch = static_cast<std::uint8_t>(Op::kNodeWatch);
  EXPECT_TRUE(is_known_op(watch));
  EXPECT_EQ(parse_status(watch, std::string(1, '\2')), Status::kInvalidArgument);
  EXPECT_EQ(parse_status(watch, ""), Status::kBadFrame);
  EXPECT_EQ(parse_status(watch, std::string(1, '\1')), Status::kOk);
  EXPECT_TRUE(is_known_op(static_cast<std::uint8_t>(Op::kMemberHeartbeat)));
  EXPECT_TRUE(is_known_op(static_cast<std::uint8_t>(Op::kNodeHeartbeat)));
  const auto node_beat = static_cast<std::uint8_t>(Op::kNodeHeartbeat);
  EXPECT_EQ(parse_status(node_beat, le32(0) + le32(1000)), Status::kInvalidArgument);     // no name
  EXPECT_EQ(parse_status(node_beat, le32(1) + "n" + le32(0)), Status::kInvalidArgument);  // 0 ms
  EXPECT_EQ(parse_status(node_beat, le32(1) + "n"), Status::kBadFrame);  // no timeout
  EXPECT_EQ(parse_status(node_beat, le32(257) + std::string(257, 'n') + le32(1)),
            Status::kLimitExceeded);  // name over kMaxMemberBytes
  EXPECT_TRUE(is_known_op(static_cast<std::uint8_t>(Op::kAbort)));
}

TEST(Protocol, MalformedRepliesAreRejected) {
  JoinReply join;
  std::string bad_join = le32(5) + le32(4) + std::string(16, '\0');  // index >= size
  EXPECT_FALSE(parse_reply(bytes_of(bad_join), join));
  ValueReply value;
  EXPECT_FALSE(parse_reply(bytes_of(le32(10) + "abc"), value));
  EmptyReply empty;
  EXPECT_FALSE(parse_reply(bytes_of(std::string("x")), empty));
}

// Arbitrary bytes never crash the decoder or the parsers (the libFuzzer target in
// tests/rendezvous runs the same on generated inputs).
TEST(Protocol, RandomBytesNeverCrash) {
  std::mt19937 rng(12345);
  std::string valid = encode_request(1, Wait{{"a", "b"}, 10});
  int ok = 0;
  for (int i = 0; i < 20000; ++i) {
    std::string buf;
    if (i % 2 == 0) {
      // Mutations of a valid frame reach deep into the parsers.
      buf = valid;
      for (int m = 0; m < 1 + i % 4; ++m) buf[rng() % buf.size()] = static_cast<char>(rng());
      buf.resize(rng() % (buf.size() + 1));
    } else {
      buf.resize(rng() % 64);
      for (auto& c : buf) c = static_cast<char>(rng());
    }
    Header h;
    std::span<const std::uint8_t> payload;
    DecodeResult r = decode_frame(bytes_of(buf), h, payload, kMaxPayloadBytes);
    if (r.status != DecodeStatus::kOk) continue;
    ASSERT_LE(r.consumed, buf.size());
    Request out;
    Status status;
    std::string_view what;
    ok += parse_request(h.op, payload, out, &status, &what);
  }
  EXPECT_GT(ok, 0);
}

TEST(Protocol, SanitizeEscapesAndCuts) {
  std::string raw("ab\x01\\\xff", 5);
  EXPECT_EQ(sanitize(bytes_of(raw)), "ab\\x01\\x5c\\xff");
  EXPECT_EQ(sanitize(bytes_of(std::string(100, 'a')), 4), "aaaa...");
}

}  // namespace
}  // namespace mlrun::rendezvous::proto
