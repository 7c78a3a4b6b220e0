#include "rendezvous/protocol.h"

#include <cstring>
#include <type_traits>

#include "rendezvous/protocol_fields.h"

namespace mlrun::rendezvous::proto {
namespace {

std::uint32_t load32(const std::uint8_t* p) {
  return std::uint32_t{p[0]} | std::uint32_t{p[1]} << 8 | std::uint32_t{p[2]} << 16 |
         std::uint32_t{p[3]} << 24;
}
void store32(std::uint8_t* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<std::uint8_t>(v >> (8 * i));
}

}  // namespace

std::string frame(std::uint8_t op, Status status, std::uint32_t request_id, std::string payload) {
  Header h;
  h.op = op;
  h.status = status;
  h.request_id = request_id;
  h.payload_bytes = static_cast<std::uint32_t>(payload.size());
  std::string out(kHeaderBytes, '\0');
  encode_header(h, reinterpret_cast<std::uint8_t*>(out.data()));
  out += payload;
  return out;
}

namespace {

void write_body(Writer& w, const Hello& r) {
  w.str(r.token);
  w.str(r.job_id);
}
void write_body(Writer& w, const Join& r) {
  w.str(r.group);
  w.u32(r.size);
  w.i32(r.index);
  w.u32(r.weight);
  w.u32(r.timeout_ms);
}
void write_body(Writer& w, const Set& r) {
  w.str(r.key);
  w.str(r.value);
}
void write_body(Writer& w, const Get& r) {
  w.str(r.key);
  w.u32(r.timeout_ms);
}
void write_body(Writer& w, const Add& r) {
  w.str(r.key);
  w.i64(r.delta);
}
void write_body(Writer& w, const CompareSet& r) {
  w.str(r.key);
  w.str(r.expected);
  w.str(r.desired);
}
void write_body(Writer& w, const Wait& r) {
  w.u32(static_cast<std::uint32_t>(r.keys.size()));
  for (const auto& k : r.keys) w.str(k);
  w.u32(r.timeout_ms);
}
void write_body(Writer& w, const Delete& r) {
  w.str(r.key);
}
void write_body(Writer& w, const Barrier& r) {
  w.str(r.name);
  w.u32(r.count);
  w.u32(r.timeout_ms);
}
void write_body(Writer&, const Heartbeat&) {}
void write_body(Writer& w, const Abort& r) {
  w.str(r.reason);
}
void write_body(Writer& w, const ElasticJoin& r) {
  w.str(r.group);
  w.str(r.member);
  w.u32(r.min_size);
  w.u32(r.max_size);
  w.i32(r.index);
  w.u32(r.weight);
  w.u32(r.last_call_ms);
  w.u32(r.heartbeat_timeout_ms);
  w.u32(r.timeout_ms);
}
void write_body(Writer& w, const MemberHeartbeat& r) {
  w.str(r.group);
  w.str(r.member);
}
void write_body(Writer& w, const NodeHeartbeat& r) {
  w.str(r.who);
  w.u32(r.timeout_ms);
}
void write_body(Writer& w, const NodeWatch& r) {
  w.u8(r.close_is_loss);
}

constexpr std::string_view kKeyTooLong = "key longer than kMaxKeyBytes";

bool read_body(Reader& r, Hello& out) {
  return r.str(out.token, kMaxTokenBytes, "token longer than kMaxTokenBytes") &&
         r.str(out.job_id, kMaxJobIdBytes, "job id longer than kMaxJobIdBytes");
}
bool read_body(Reader& r, Join& out) {
  if (!r.str(out.group, kMaxKeyBytes, "group name longer than kMaxKeyBytes") || !r.u32(out.size) ||
      !r.i32(out.index) || !r.u32(out.weight) || !r.u32(out.timeout_ms)) {
    return false;
  }
  if (out.size == 0 || out.size > kMaxGroupSize) {
    return r.fail(Status::kLimitExceeded, "join size is 0 or above kMaxGroupSize");
  }
  if (out.weight > kMaxJoinWeight) {
    return r.fail(Status::kLimitExceeded, "join weight above kMaxJoinWeight");
  }
  if (out.index < -1 || (out.index >= 0 && static_cast<std::uint32_t>(out.index) >= out.size)) {
    return r.fail(Status::kInvalidArgument, "join index outside [-1, size)");
  }
  return true;
}
bool read_body(Reader& r, Set& out) {
  return r.str(out.key, kMaxKeyBytes, kKeyTooLong) &&
         r.str(out.value, kMaxValueBytes, "value longer than kMaxValueBytes");
}
bool read_body(Reader& r, Get& out) {
  return r.str(out.key, kMaxKeyBytes, kKeyTooLong) && r.u32(out.timeout_ms);
}
bool read_body(Reader& r, Add& out) {
  return r.str(out.key, kMaxKeyBytes, kKeyTooLong) && r.i64(out.delta);
}
bool read_body(Reader& r, CompareSet& out) {
  return r.str(out.key, kMaxKeyBytes, kKeyTooLong) &&
         r.str(out.expected, kMaxValueBytes, "value longer than kMaxValueBytes") &&
         r.str(out.desired, kMaxValueBytes, "value longer than kMaxValueBytes");
}
bool read_body(Reader& r, Wait& out) {
  std::uint32_t count;
  if (!r.u32(count)) return false;
  if (count > kMaxKeysPerWait)
    return r.fail(Status::kLimitExceeded, "more keys than kMaxKeysPerWait");
  // Each key takes at least its 4-byte length: a count the payload cannot hold is rejected
  // before the vector is sized.
  if (count > r.left() / 4) return r.fail(Status::kBadFrame, "key count runs past the payload");
  out.keys.resize(count);
  for (auto& k : out.keys) {
    if (!r.str(k, kMaxKeyBytes, kKeyTooLong)) return false;
  }
  return r.u32(out.timeout_ms);
}
bool read_body(Reader& r, Delete& out) {
  return r.str(out.key, kMaxKeyBytes, kKeyTooLong);
}
bool read_body(Reader& r, Barrier& out) {
  if (!r.str(out.name, kMaxKeyBytes, "barrier name longer than kMaxKeyBytes") ||
      !r.u32(out.count) || !r.u32(out.timeout_ms)) {
    return false;
  }
  if (out.count == 0 || out.count > kMaxGroupSize) {
    return r.fail(Status::kLimitExceeded, "barrier count is 0 or above kMaxGroupSize");
  }
  return true;
}
bool read_body(Reader&, Heartbeat&) {
  return true;
}
bool read_body(Reader& r, Abort& out) {
  return r.str(out.reason, kMaxMessageBytes, "abort reason longer than kMaxMessageBytes");
}
bool read_body(Reader& r, ElasticJoin& out) {
  if (!r.str(out.group, kMaxKeyBytes, "group name longer than kMaxKeyBytes") ||
      !r.str(out.member, kMaxMemberBytes, "member id longer than kMaxMemberBytes") ||
      !r.u32(out.min_size) || !r.u32(out.max_size) || !r.i32(out.index) || !r.u32(out.weight) ||
      !r.u32(out.last_call_ms) || !r.u32(out.heartbeat_timeout_ms) || !r.u32(out.timeout_ms)) {
    return false;
  }
  if (out.min_size == 0 || out.max_size > kMaxGroupSize) {
    return r.fail(Status::kLimitExceeded, "elastic join min is 0 or max above kMaxGroupSize");
  }
  if (out.min_size > out.max_size) {
    return r.fail(Status::kInvalidArgument, "elastic join min above max");
  }
  if (out.member.empty()) return r.fail(Status::kInvalidArgument, "empty member id");
  if (out.weight > kMaxJoinWeight) {
    return r.fail(Status::kLimitExceeded, "join weight above kMaxJoinWeight");
  }
  if (out.index < -1 || (out.index >= 0 && static_cast<std::uint32_t>(out.index) >= out.max_size)) {
    return r.fail(Status::kInvalidArgument, "elastic join index outside [-1, max)");
  }
  return true;
}
bool read_body(Reader& r, MemberHeartbeat& out) {
  if (!r.str(out.group, kMaxKeyBytes, "group name longer than kMaxKeyBytes") ||
      !r.str(out.member, kMaxMemberBytes, "member id longer than kMaxMemberBytes")) {
    return false;
  }
  if (out.member.empty()) return r.fail(Status::kInvalidArgument, "empty member id");
  return true;
}
bool read_body(Reader& r, NodeHeartbeat& out) {
  if (!r.str(out.who, kMaxMemberBytes, "node name longer than kMaxMemberBytes") ||
      !r.u32(out.timeout_ms)) {
    return false;
  }
  if (out.who.empty()) return r.fail(Status::kInvalidArgument, "empty node name");
  if (out.timeout_ms == 0) return r.fail(Status::kInvalidArgument, "heartbeat timeout of 0 ms");
  return true;
}
bool read_body(Reader& r, NodeWatch& out) {
  if (!r.u8(out.close_is_loss)) return false;
  if (out.close_is_loss > 1) return r.fail(Status::kInvalidArgument, "close_is_loss not 0 or 1");
  return true;
}

template <typename T>
bool parse_as(std::span<const std::uint8_t> payload, Request& out, Status* error,
              std::string_view* what) {
  Reader r(payload);
  T body;
  if (read_body(r, body) && r.end()) {
    out = std::move(body);
    return true;
  }
  *error = r.error();
  *what = r.what();
  return false;
}

}  // namespace

bool is_known_op(std::uint8_t op) {
  return op >= static_cast<std::uint8_t>(Op::kHello) &&
         op <= static_cast<std::uint8_t>(Op::kNodeWatch);
}

std::string_view op_name(Op op) {
  switch (op) {
    case Op::kHello:
      return "hello";
    case Op::kJoin:
      return "join";
    case Op::kSet:
      return "set";
    case Op::kGet:
      return "get";
    case Op::kAdd:
      return "add";
    case Op::kCompareSet:
      return "compare_set";
    case Op::kWait:
      return "wait";
    case Op::kDelete:
      return "delete";
    case Op::kBarrier:
      return "barrier";
    case Op::kHeartbeat:
      return "heartbeat";
    case Op::kAbort:
      return "abort";
    case Op::kElasticJoin:
      return "elastic_join";
    case Op::kMemberHeartbeat:
      return "member_heartbeat";
    case Op::kNodeHeartbeat:
      return "node_heartbeat";
    case Op::kNodeWatch:
      return "node_watch";
  }
  return "unknown";
}

std::string_view status_name(Status status) {
  switch (status) {
    case Status::kOk:
      return "ok";
    case Status::kNotFound:
      return "not found";
    case Status::kTimeout:
      return "timeout";
    case Status::kAuthFailed:
      return "authentication failed";
    case Status::kAborted:
      return "aborted";
    case Status::kBadFrame:
      return "bad frame";
    case Status::kUnsupportedVersion:
      return "unsupported version";
    case Status::kInvalidArgument:
      return "invalid argument";
    case Status::kConflict:
      return "conflict";
    case Status::kLimitExceeded:
      return "limit exceeded";
    case Status::kShuttingDown:
      return "shutting down";
  }
  return "unknown status";
}

void encode_header(const Header& h, std::uint8_t out[kHeaderBytes]) {
  store32(out, kMagic);
  out[4] = h.version;
  out[5] = h.op;
  auto status = static_cast<std::uint16_t>(h.status);
  out[6] = static_cast<std::uint8_t>(status);
  out[7] = static_cast<std::uint8_t>(status >> 8);
  store32(out + 8, h.request_id);
  store32(out + 12, h.payload_bytes);
}

DecodeResult decode_header(std::span<const std::uint8_t> bytes, Header& out,
                           std::size_t max_payload) {
  DecodeResult result;
  // Check the magic on however many bytes are there, so that garbage is refused at once rather
  // than after waiting for a whole header that may never come.
  static constexpr std::uint8_t kMagicBytes[4] = {'M', 'L', 'R', 'Z'};
  std::size_t have = bytes.size() < 4 ? bytes.size() : 4;
  if (have > 0 && std::memcmp(bytes.data(), kMagicBytes, have) != 0) {
    result.status = DecodeStatus::kError;
    result.error = Status::kBadFrame;
    result.what = "bad magic";
    return result;
  }
  if (bytes.size() < kHeaderBytes) return result;
  out.version = bytes[4];
  out.op = bytes[5];
  out.status = static_cast<Status>(std::uint16_t{bytes[6]} | std::uint16_t{bytes[7]} << 8);
  out.request_id = load32(bytes.data() + 8);
  out.payload_bytes = load32(bytes.data() + 12);
  result.status = DecodeStatus::kError;
  if (out.version != kVersion) {
    result.error = Status::kUnsupportedVersion;
    result.what = "unsupported protocol version";
  } else if (out.payload_bytes > max_payload) {
    result.error = Status::kLimitExceeded;
    result.what = "payload longer than the frame limit";
  } else {
    result.status = DecodeStatus::kOk;
    result.consumed = kHeaderBytes;
  }
  return result;
}

DecodeResult decode_frame(std::span<const std::uint8_t> bytes, Header& header,
                          std::span<const std::uint8_t>& payload, std::size_t max_payload) {
  DecodeResult result = decode_header(bytes, header, max_payload);
  if (result.status != DecodeStatus::kOk) return result;
  if (bytes.size() - kHeaderBytes < header.payload_bytes) {
    result.status = DecodeStatus::kNeedMore;
    result.consumed = 0;
    return result;
  }
  payload = bytes.subspan(kHeaderBytes, header.payload_bytes);
  result.consumed = kHeaderBytes + header.payload_bytes;
  return result;
}

Op op_of(const Request& request) {
  static constexpr Op kOps[] = {Op::kHello,
                                Op::kJoin,
                                Op::kSet,
                                Op::kGet,
                                Op::kAdd,
                                Op::kCompareSet,
                                Op::kWait,
                                Op::kDelete,
                                Op::kBarrier,
                                Op::kHeartbeat,
                                Op::kAbort,
                                Op::kElasticJoin,
                                Op::kMemberHeartbeat,
                                Op::kNodeHeartbeat,
                                Op::kNodeWatch};
  static_assert(std::variant_size_v<Request> == std::size(kOps));
  return kOps[request.index()];
}

std::string encode_request(std::uint32_t request_id, const Request& request) {
  Writer w;
  std::visit([&](const auto& body) { write_body(w, body); }, request);
  return frame(static_cast<std::uint8_t>(op_of(request)), Status::kOk, request_id, w.take());
}

bool parse_request(std::uint8_t op, std::span<const std::uint8_t> payload, Request& out,
                   Status* error, std::string_view* what) {
  switch (static_cast<Op>(op)) {
    case Op::kHello:
      return parse_as<Hello>(payload, out, error, what);
    case Op::kJoin:
      return parse_as<Join>(payload, out, error, what);
    case Op::kSet:
      return parse_as<Set>(payload, out, error, what);
    case Op::kGet:
      return parse_as<Get>(payload, out, error, what);
    case Op::kAdd:
      return parse_as<Add>(payload, out, error, what);
    case Op::kCompareSet:
      return parse_as<CompareSet>(payload, out, error, what);
    case Op::kWait:
      return parse_as<Wait>(payload, out, error, what);
    case Op::kDelete:
      return parse_as<Delete>(payload, out, error, what);
    case Op::kBarrier:
      return parse_as<Barrier>(payload, out, error, what);
    case Op::kHeartbeat:
      return parse_as<Heartbeat>(payload, out, error, what);
    case Op::kAbort:
      return parse_as<Abort>(payload, out, error, what);
    case Op::kElasticJoin:
      return parse_as<ElasticJoin>(payload, out, error, what);
    case Op::kMemberHeartbeat:
      return parse_as<MemberHeartbeat>(payload, out, error, what);
    case Op::kNodeHeartbeat:
      return parse_as<NodeHeartbeat>(payload, out, error, what);
    case Op::kNodeWatch:
      return parse_as<NodeWatch>(payload, out, error, what);
  }
  *error = Status::kBadFrame;
  *what = "unknown op";
  return false;
}

std::string sanitize(std::span<const std::uint8_t> bytes, std::size_t max_bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  std::size_t n = bytes.size() < max_bytes ? bytes.size() : max_bytes;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint8_t c = bytes[i];
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out.push_back(static_cast<char>(c));
    } else {
      out += "\\x";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  if (bytes.size() > n) out += "...";
  return out;
}

}  // namespace mlrun::rendezvous::proto