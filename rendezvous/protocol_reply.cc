// Replies: one encoder and one parser per reply body (docs/protocol.md), and error replies.
#include "rendezvous/protocol.h"

#include "rendezvous/protocol_fields.h"

namespace mlrun::rendezvous::proto {

namespace {
std::uint8_t reply_op(Op op) {
  return static_cast<std::uint8_t>(op) | kReplyBit;
}
}  // namespace

std::string encode_reply(Op op, std::uint32_t id, const HelloReply& body) {
  Writer w;
  w.u8(body.server_version);
  return frame(reply_op(op), Status::kOk, id, w.take());
}
std::string encode_reply(Op op, std::uint32_t id, const JoinReply& body) {
  Writer w;
  w.u32(body.index);
  w.u32(body.size);
  w.u64(body.offset);
  w.u64(body.total);
  return frame(reply_op(op), Status::kOk, id, w.take());
}
std::string encode_reply(Op op, std::uint32_t id, const ElasticJoinReply& body) {
  Writer w;
  w.u32(body.round);
  w.u32(body.index);
  w.u32(body.size);
  w.u64(body.offset);
  w.u64(body.total);
  w.str(body.members);
  return frame(reply_op(op), Status::kOk, id, w.take());
}
std::string encode_reply(Op op, std::uint32_t id, const ValueReply& body) {
  Writer w;
  w.str(body.value);
  return frame(reply_op(op), Status::kOk, id, w.take());
}
std::string encode_reply(Op op, std::uint32_t id, const AddReply& body) {
  Writer w;
  w.i64(body.value);
  return frame(reply_op(op), Status::kOk, id, w.take());
}
std::string encode_reply(Op op, std::uint32_t id, const CompareSetReply& body) {
  Writer w;
  w.u8(body.swapped ? 1 : 0);
  w.str(body.value);
  return frame(reply_op(op), Status::kOk, id, w.take());
}
std::string encode_reply(Op op, std::uint32_t id, const DeleteReply& body) {
  Writer w;
  w.u8(body.existed ? 1 : 0);
  return frame(reply_op(op), Status::kOk, id, w.take());
}
std::string encode_reply(Op op, std::uint32_t id, const EmptyReply&) {
  return frame(reply_op(op), Status::kOk, id, {});
}
std::string encode_error(std::uint8_t op, std::uint32_t id, Status status,
                         std::string_view message) {
  if (message.size() > kMaxMessageBytes) message = message.substr(0, kMaxMessageBytes);
  return frame(op | kReplyBit, status, id, std::string(message));
}

bool parse_reply(std::span<const std::uint8_t> payload, HelloReply& out) {
  Reader r(payload);
  return r.u8(out.server_version) && r.end();
}
bool parse_reply(std::span<const std::uint8_t> payload, JoinReply& out) {
  Reader r(payload);
  return r.u32(out.index) && r.u32(out.size) && r.u64(out.offset) && r.u64(out.total) && r.end() &&
         out.index < out.size;
}
bool parse_reply(std::span<const std::uint8_t> payload, ElasticJoinReply& out) {
  Reader r(payload);
  return r.u32(out.round) && r.u32(out.index) && r.u32(out.size) && r.u64(out.offset) &&
         r.u64(out.total) && r.str(out.members, kMaxValueBytes, "") && r.end() &&
         out.index < out.size;
}
bool parse_reply(std::span<const std::uint8_t> payload, ValueReply& out) {
  Reader r(payload);
  return r.str(out.value, kMaxValueBytes, "") && r.end();
}
bool parse_reply(std::span<const std::uint8_t> payload, AddReply& out) {
  Reader r(payload);
  return r.i64(out.value) && r.end();
}
bool parse_reply(std::span<const std::uint8_t> payload, CompareSetReply& out) {
  Reader r(payload);
  std::uint8_t swapped;
  if (!r.u8(swapped) || !r.str(out.value, kMaxValueBytes, "") || !r.end()) return false;
  out.swapped = swapped != 0;
  return true;
}
bool parse_reply(std::span<const std::uint8_t> payload, DeleteReply& out) {
  Reader r(payload);
  std::uint8_t existed;
  if (!r.u8(existed) || !r.end()) return false;
  out.existed = existed != 0;
  return true;
}
bool parse_reply(std::span<const std::uint8_t> payload, EmptyReply&) {
  return payload.empty();
}

std::string error_message(std::span<const std::uint8_t> payload) {
  std::size_t n = payload.size() < kMaxMessageBytes ? payload.size() : kMaxMessageBytes;
  return std::string(reinterpret_cast<const char*>(payload.data()), n);
}

}  // namespace mlrun::rendezvous::proto
