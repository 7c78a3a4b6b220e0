// libFuzzer target: the TCPStore dialect detection and request decoder (torch_store.cc) on
// arbitrary bytes, read the way the server reads a connection: dialect from the first bytes,
// then one request after another, each also fed split at an arbitrary point (clients split
// writes anywhere). Built and run for a bounded time by tests/rendezvous.
#include <cstddef>
#include <cstdint>

#include "rendezvous/torch_space.h"
#include "rendezvous/torch_store.h"

using namespace mlrun::rendezvous::torch;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  // The first byte picks where each request is split; the rest is the stream.
  const std::size_t split_seed = data[0];
  std::span<const std::uint8_t> bytes(data + 1, size - 1);
  Dialect d = detect(bytes);
  if (d != Dialect::kTorch113 && d != Dialect::kTorch2) return 0;
  KeySpace space;
  while (!bytes.empty()) {
    Request r;
    Decoded whole = decode(d, bytes, r);
    // A prefix of a request never decodes to something else: it needs more, or is the same
    // error found earlier.
    std::size_t cut = split_seed % (bytes.size() + 1);
    Request partial;
    Decoded part = decode(d, bytes.first(cut), partial);
    if (whole.status == DecodeStatus::kOk) {
      if (whole.bytes == 0 || whole.bytes > bytes.size()) __builtin_trap();
      if (cut < whole.bytes && part.status == DecodeStatus::kOk) __builtin_trap();
      if (part.status == DecodeStatus::kNeedMore && part.bytes > whole.bytes) __builtin_trap();
    } else if (whole.status == DecodeStatus::kNeedMore) {
      if (part.status == DecodeStatus::kOk) __builtin_trap();
      if (whole.bytes <= bytes.size()) __builtin_trap();
      return 0;
    } else {
      return 0;
    }
    // Keep the key space's accounting honest under whatever the requests do.
    if (!r.keys.empty()) {
      std::int64_t sum;
      std::string out;
      bool changed;
      switch (r.op) {
        case Op::kSet:
          space.set(r.keys[0], r.values[0]);
          break;
        case Op::kAppend:
          space.append(r.keys[0], r.values[0]);
          break;
        case Op::kAdd:
          space.add(r.keys[0], r.delta, &sum);
          break;
        case Op::kCompareSet:
          space.compare_set(r.keys[0], r.values[0], r.values[1], &out, &changed);
          break;
        case Op::kDeleteKey:
          space.erase(r.keys[0]);
          break;
        default:
          break;
      }
      if (space.size() == 0 && space.memory() != 0) __builtin_trap();
    }
    bytes = bytes.subspan(whole.bytes);
  }
  return 0;
}
