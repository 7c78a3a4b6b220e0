// PyTorch's c10d TCPStore protocol (torch 1.13 and torch 2.x), as mlrun's rendezvous server
// speaks it on its own port: dialect detection from a connection's first bytes, a decoder of
// requests that may arrive split anywhere, reply encoders, and the limits every length and count
// is checked against. Pure functions, no I/O, so that the decoder can be fuzzed and tested on
// recorded byte streams. docs/torch-store.md is the reference.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace mlrun::rendezvous::torch {

// --- Limits (each checked as soon as its length field is read, before any allocation) --------

/// One key (PyTorch's own keys are tens of bytes; NCCL's are under 100).
inline constexpr std::size_t kMaxKeyBytes = 8u << 10;
/// One value (an ncclUniqueId is 128 bytes, a Gloo address 136).
inline constexpr std::size_t kMaxValueBytes = 8u << 20;
/// Keys in one key space, and keys named by one request (WAIT, CHECK, MULTI_GET, MULTI_SET).
inline constexpr std::size_t kMaxKeys = 128u << 10;
/// The keys and values of one request together: a MULTI_SET of many large values is refused
/// rather than buffered.
inline constexpr std::size_t kMaxRequestBytes = 16u << 20;
/// What a KeySpace with a budget of its own may hold, counted as real memory (entry overhead and
/// string blocks). The server's key spaces are charged to its one cap instead (ServerOptions::
/// max_memory).
inline constexpr std::size_t kMaxSpaceBytes = std::size_t{1} << 30;

/// torch 2.x's VALIDATE magic (the u32 after opcode 0 on a new connection).
inline constexpr std::uint32_t kValidateMagic = 0x3C85F7CE;

// --- Dialects --------------------------------------------------------------------------------

enum class Dialect : std::uint8_t {
  kUnknown,   ///< Not enough bytes yet to tell.
  kMlrun,     ///< mlrun's own framed protocol (docs/protocol.md): starts with "MLRZ".
  kTorch113,  ///< torch 1.13: no handshake, opcodes 0..8.
  kTorch2,    ///< torch 2.x since VALIDATE: starts with 00 ce f7 85 3c.
  kInvalid,   ///< None of these: the first byte is no opcode of any dialect.
};
std::string_view dialect_name(Dialect d);

/// Tells the dialect from the first bytes a connection sent (kUnknown: send more). A 1.13 SET
/// also starts with 00, but its key length would have to be 0x3C85F7CE + ..., far beyond
/// kMaxKeyBytes, so five bytes decide.
Dialect detect(std::span<const std::uint8_t> first);

// --- Requests --------------------------------------------------------------------------------

/// The operations, by meaning; each dialect numbers them its own way.
enum class Op : std::uint8_t {
  kValidate,
  kSet,
  kCompareSet,
  kGet,
  kAdd,
  kCheck,
  kWait,
  kGetNumKeys,
  kWatchKey,
  kDeleteKey,
  kAppend,
  kMultiGet,
  kMultiSet,
  kCancelWait,
  kPing,
};
std::string_view op_name(Op op);

struct Request {
  Op op = Op::kSet;
  /// SET, COMPARE_SET, GET, ADD, WATCH_KEY, DELETE_KEY, APPEND: one key; CHECK, WAIT,
  /// MULTI_GET, MULTI_SET: all the keys named.
  std::vector<std::string> keys;
  /// SET, APPEND: the value; COMPARE_SET: expected, desired; MULTI_SET: one per key.
  std::vector<std::string> values;
  std::int64_t delta = 0;  ///< ADD.
  std::uint32_t word = 0;  ///< VALIDATE's magic, PING's nonce.
};

enum class DecodeStatus { kNeedMore, kOk, kError };

struct Decoded {
  DecodeStatus status = DecodeStatus::kNeedMore;
  /// kOk: bytes of the whole request. kNeedMore: the least total the request needs so far
  /// (the caller makes room for it, so a large value arrives in few reads).
  std::size_t bytes = 0;
  std::string_view what;  ///< kError: a static description.
};

/// Decodes one request from the front of bytes in dialect d (kTorch113 or kTorch2). A request
/// cut short anywhere is kNeedMore; a length past its limit or an unknown opcode is kError at
/// once, whatever follows.
Decoded decode(Dialect d, std::span<const std::uint8_t> bytes, Request& out);

// --- Replies (a reply carries no opcode: requests are answered in order) ----------------------

/// WAIT's and CANCEL_WAIT's reply values (WaitResponseType), and CHECK's (CheckResponseType).
inline constexpr std::uint8_t kStopWaiting = 0;
inline constexpr std::uint8_t kWaitCanceled = 1;
inline constexpr std::uint8_t kReady = 0;
inline constexpr std::uint8_t kNotReady = 1;

void append_u8(std::string& out, std::uint8_t v);
void append_u32(std::string& out, std::uint32_t v);
void append_i64(std::string& out, std::int64_t v);
/// u64 length + bytes.
void append_bytes(std::string& out, std::string_view v);

/// A request as a client of dialect d sends it (tests and the benchmark's clients).
std::string encode(Dialect d, const Request& r);

}  // namespace mlrun::rendezvous::torch
