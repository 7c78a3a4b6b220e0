// Fetches the NCCL unique ID of communicator "world" through mlrun and prints it in hex, so that
// "every rank gets identical bytes" can be checked on a host without a GPU:
//
//   mlrun --nproc_per_node=4 --no_python build/examples/nccl_allreduce/nccl_unique_id
//
// prints one line per rank, `nccl_unique_id: rank R of W: <256 hex digits>`. Rank 0 makes the ID
// with ncclGetUniqueId (libnccl.so.2, loaded by the library with dlopen; no GPU needed).
// `nccl_unique_id --check` only tells whether libnccl.so.2 can be loaded: exit 0 if so, 77 if
// not (ctest's "skipped").
#include <dlfcn.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include <mlrun/rendezvous.hpp>

int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "--check") == 0) {
    void* nccl = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (nccl == nullptr) {
      std::printf("nccl_unique_id: cannot load libnccl.so.2: %s\n", dlerror());
      return 77;
    }
    return 0;
  }
  try {
    auto client = mlrun::rendezvous::Client::from_env();
    client.set_timeout(std::chrono::seconds(60));
    std::array<char, 128> id = client.nccl_unique_id("world");
    std::string hex;
    for (char c : id) {
      static const char kDigits[] = "0123456789abcdef";
      hex += kDigits[static_cast<unsigned char>(c) >> 4];
      hex += kDigits[static_cast<unsigned char>(c) & 15];
    }
    // The root's bootstrap listener lives in rank 0's process: nobody leaves before all have it.
    client.barrier("nccl_unique_id/done");
    std::printf("nccl_unique_id: rank %d of %d: %s\n", client.rank(), client.world_size(),
                hex.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nccl_unique_id: %s\n", e.what());
    return 1;
  }
}
