// The rendezvous wire protocol: framing, request and reply bodies, and the limits every length
// and count read from the network is checked against. Pure functions, no I/O, so that the
// decoder can be fuzzed and unit-tested on arbitrary bytes. docs/protocol.md is the reference.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace mlrun::rendezvous::proto {

// --- Framing ---------------------------------------------------------------------------------

/// "MLRZ" as it appears on the wire (little-endian u32).
inline constexpr std::uint32_t kMagic = 0x5A524C4D;
inline constexpr std::uint8_t kVersion = 1;
/// magic u32, version u8, op u8, status u16, request id u32, payload length u32.
inline constexpr std::size_t kHeaderBytes = 16;
/// Set in the op byte of every reply.
inline constexpr std::uint8_t kReplyBit = 0x80;

// --- Limits (each checked before anything is allocated) --------------------------------------

/// Largest payload of any frame after authentication.
inline constexpr std::size_t kMaxPayloadBytes = 4u << 20;
/// Largest payload before authentication: a HELLO is small, and an unauthenticated peer must
/// not make the server allocate more than this.
inline constexpr std::size_t kMaxHelloPayloadBytes = 4096;
inline constexpr std::size_t kMaxTokenBytes = 1024;
inline constexpr std::size_t kMaxJobIdBytes = 256;
/// Keys, barrier names and join group names.
inline constexpr std::size_t kMaxKeyBytes = 4096;
inline constexpr std::size_t kMaxValueBytes = kMaxPayloadBytes - kMaxKeyBytes - 64;
inline constexpr std::size_t kMaxKeysPerWait = 16384;
/// Abort reasons and error messages.
inline constexpr std::size_t kMaxMessageBytes = 4096;
/// Members of one join group and arrivals of one barrier.
inline constexpr std::uint32_t kMaxGroupSize = 1u << 20;
/// Weight of one join member (a node's local world size).
inline constexpr std::uint32_t kMaxJoinWeight = 1u << 16;
/// A member's identity in an elastic group (elastic_join, member_heartbeat).
inline constexpr std::size_t kMaxMemberBytes = 256;

enum class Op : std::uint8_t {
  kHello = 1,
  kJoin = 2,
  kSet = 3,
  kGet = 4,
  kAdd = 5,
  kCompareSet = 6,
  kWait = 7,
  kDelete = 8,
  kBarrier = 9,
  kHeartbeat = 10,
  kAbort = 11,
  // Added in protocol 1.1 (the version byte stays 1; a 1.0 server answers them "unknown op").
  kElasticJoin = 12,
  kMemberHeartbeat = 13,
  // Added in protocol 1.2 (additive too; a 1.1 server answers it "unknown op").
  kNodeHeartbeat = 14,
  // Added in protocol 1.3 (additive too; a 1.2 server answers it "unknown op").
  kNodeWatch = 15,
};
/// True for the request ops above.
bool is_known_op(std::uint8_t op);
std::string_view op_name(Op op);

/// The status of a reply; requests carry 0.
enum class Status : std::uint16_t {
  kOk = 0,
  kNotFound = 1,
  kTimeout = 2,
  kAuthFailed = 3,
  kAborted = 4,
  kBadFrame = 5,
  kUnsupportedVersion = 6,
  kInvalidArgument = 7,
  kConflict = 8,
  kLimitExceeded = 9,
  kShuttingDown = 10,
};
std::string_view status_name(Status status);

struct Header {
  std::uint8_t version = kVersion;
  std::uint8_t op = 0;  ///< An Op, with kReplyBit in replies.
  Status status = Status::kOk;
  std::uint32_t request_id = 0;
  std::uint32_t payload_bytes = 0;
};

enum class DecodeStatus { kNeedMore, kOk, kError };

struct DecodeResult {
  DecodeStatus status = DecodeStatus::kNeedMore;
  std::size_t consumed = 0;    ///< Bytes of a complete frame (kOk only).
  Status error = Status::kOk;  ///< kError: the status to reply with.
  std::string_view what;       ///< kError: a static description.
};

/// Decodes a header from the first kHeaderBytes of bytes. Checks magic, version and
/// payload_bytes <= max_payload; does not check the op (the caller replies to unknown ops).
DecodeResult decode_header(std::span<const std::uint8_t> bytes, Header& out,
                           std::size_t max_payload);

/// Decodes one whole frame from the front of bytes; payload points into bytes.
DecodeResult decode_frame(std::span<const std::uint8_t> bytes, Header& header,
                          std::span<const std::uint8_t>& payload, std::size_t max_payload);

void encode_header(const Header& header, std::uint8_t out[kHeaderBytes]);

// --- Requests --------------------------------------------------------------------------------

struct Hello {
  std::string token;
  std::string job_id;  ///< Empty: any job.
};
/// Join group `group` of `size` members; index -1 takes the next free index in join order.
struct Join {
  std::string group;
  std::uint32_t size = 0;
  std::int32_t index = -1;
  std::uint32_t weight = 1;
  std::uint32_t timeout_ms = 0;
};
struct Set {
  std::string key;
  std::string value;
};
/// timeout_ms 0: reply kNotFound at once when the key is missing.
struct Get {
  std::string key;
  std::uint32_t timeout_ms = 0;
};
struct Add {
  std::string key;
  std::int64_t delta = 0;
};
struct CompareSet {
  std::string key;
  std::string expected;
  std::string desired;
};
struct Wait {
  std::vector<std::string> keys;
  std::uint32_t timeout_ms = 0;
};
struct Delete {
  std::string key;
};
struct Barrier {
  std::string name;
  std::uint32_t count = 0;
  std::uint32_t timeout_ms = 0;
};
struct Heartbeat {};
struct Abort {
  std::string reason;
};
/// Join the next membership round of elastic group `group` as `member` (docs/protocol.md).
struct ElasticJoin {
  std::string group;
  std::string member;
  std::uint32_t min_size = 1;
  std::uint32_t max_size = 1;
  std::int32_t index = -1;  ///< Preferred index, -1: none.
  std::uint32_t weight = 1;
  std::uint32_t last_call_ms = 0;
  std::uint32_t heartbeat_timeout_ms = 0;  ///< 0: members are never timed out.
  std::uint32_t timeout_ms = 0;
};
/// `member` of elastic group `group` is alive; the connection becomes its lifeline.
struct MemberHeartbeat {
  std::string group;
  std::string member;
};

/// A node of a fixed-size job is alive (docs/protocol.md, "Node heartbeats"): when nothing
/// comes on this connection for timeout_ms, the server aborts the job naming `who`.
struct NodeHeartbeat {
  std::string who;  ///< "node 1 (host2)": for the abort's reason.
  std::uint32_t timeout_ms = 0;
};

/// Whether closing this connection, whose node heartbeats the server watches, is the node's loss
/// (docs/protocol.md, "Node heartbeats"): armed by a node that no head watches, disarmed before
/// it closes the connection at its normal end.
struct NodeWatch {
  std::uint8_t close_is_loss = 0;
};

using Request =
    std::variant<Hello, Join, Set, Get, Add, CompareSet, Wait, Delete, Barrier, Heartbeat, Abort,
                 ElasticJoin, MemberHeartbeat, NodeHeartbeat, NodeWatch>;

Op op_of(const Request& request);

/// A whole request frame.
std::string encode_request(std::uint32_t request_id, const Request& request);

/// Parses the payload of a request frame whose op is `op`. On failure returns false with
/// *error (kBadFrame, kLimitExceeded, ...) and *what (static text) set.
bool parse_request(std::uint8_t op, std::span<const std::uint8_t> payload, Request& out,
                   Status* error, std::string_view* what);

// --- Replies ---------------------------------------------------------------------------------

struct HelloReply {
  std::uint8_t server_version = kVersion;
};
struct JoinReply {
  std::uint32_t index = 0;   ///< This member's index (a node rank, or a process rank).
  std::uint32_t size = 0;    ///< Members in the group.
  std::uint64_t offset = 0;  ///< Sum of the weights of lower indices (a node's first rank).
  std::uint64_t total = 0;   ///< Sum of all weights (the world size).
};
struct ElasticJoinReply {
  std::uint32_t round = 0;  ///< The round's number: 0, 1, ... for the group's whole life.
  std::uint32_t index = 0;
  std::uint32_t size = 0;
  std::uint64_t offset = 0;
  std::uint64_t total = 0;
  std::string members;  ///< Member ids in index order, one per line.
};
struct ValueReply {
  std::string value;
};
struct AddReply {
  std::int64_t value = 0;
};
struct CompareSetReply {
  bool swapped = false;
  std::string value;  ///< The value held after the call ("" when the key is missing).
};
struct DeleteReply {
  bool existed = false;
};
struct EmptyReply {};

/// A reply frame with status kOk. `body` is one of the reply structs.
std::string encode_reply(Op op, std::uint32_t request_id, const HelloReply& body);
std::string encode_reply(Op op, std::uint32_t request_id, const JoinReply& body);
std::string encode_reply(Op op, std::uint32_t request_id, const ElasticJoinReply& body);
std::string encode_reply(Op op, std::uint32_t request_id, const ValueReply& body);
std::string encode_reply(Op op, std::uint32_t request_id, const AddReply& body);
std::string encode_reply(Op op, std::uint32_t request_id, const CompareSetReply& body);
std::string encode_reply(Op op, std::uint32_t request_id, const DeleteReply& body);
std::string encode_reply(Op op, std::uint32_t request_id, const EmptyReply& body);
/// A reply frame with an error status; the payload is the message, cut to kMaxMessageBytes.
/// op may be an unknown byte (the reply to an unknown op echoes it).
std::string encode_error(std::uint8_t op, std::uint32_t request_id, Status status,
                         std::string_view message);

/// Parse reply payloads (status kOk). Return false on a malformed payload.
bool parse_reply(std::span<const std::uint8_t> payload, HelloReply& out);
bool parse_reply(std::span<const std::uint8_t> payload, JoinReply& out);
bool parse_reply(std::span<const std::uint8_t> payload, ElasticJoinReply& out);
bool parse_reply(std::span<const std::uint8_t> payload, ValueReply& out);
bool parse_reply(std::span<const std::uint8_t> payload, AddReply& out);
bool parse_reply(std::span<const std::uint8_t> payload, CompareSetReply& out);
bool parse_reply(std::span<const std::uint8_t> payload, DeleteReply& out);
bool parse_reply(std::span<const std::uint8_t> payload, EmptyReply& out);
/// The message of an error reply (its whole payload, cut to kMaxMessageBytes).
std::string error_message(std::span<const std::uint8_t> payload);

/// Printable excerpt of untrusted bytes for a log line: at most max_bytes, non-printable bytes
/// as \xNN.
std::string sanitize(std::span<const std::uint8_t> bytes, std::size_t max_bytes = 64);

}  // namespace mlrun::rendezvous::proto
