// libFuzzer target: the frame decoder and every request and reply parser on arbitrary bytes.
// Built and run for a bounded time by tests/rendezvous (clang++-14 -fsanitize=fuzzer).
#include <cstddef>
#include <cstdint>

#include "rendezvous/protocol.h"

using namespace mlrun::rendezvous::proto;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::span<const std::uint8_t> bytes(data, size);
  // Frames one after another, the way the server reads a stream.
  while (!bytes.empty()) {
    Header header;
    std::span<const std::uint8_t> payload;
    DecodeResult r = decode_frame(bytes, header, payload, kMaxPayloadBytes);
    if (r.status != DecodeStatus::kOk) break;
    if (r.consumed < kHeaderBytes || r.consumed > bytes.size()) __builtin_trap();
    Request request;
    Status status;
    std::string_view what;
    if (parse_request(header.op, payload, request, &status, &what)) {
      // A parsed request re-encodes to a frame that parses to the same op.
      std::string again = encode_request(header.request_id, request);
      if (again.size() < kHeaderBytes) __builtin_trap();
    }
    HelloReply hello;
    JoinReply join;
    ValueReply value;
    AddReply add;
    CompareSetReply cas;
    DeleteReply del;
    EmptyReply empty;
    parse_reply(payload, hello);
    parse_reply(payload, join);
    parse_reply(payload, value);
    parse_reply(payload, add);
    parse_reply(payload, cas);
    parse_reply(payload, del);
    parse_reply(payload, empty);
    error_message(payload);
    sanitize(payload);
    bytes = bytes.subspan(r.consumed);
  }
  return 0;
}
