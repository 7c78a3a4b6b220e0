// An NCCL allreduce on one GPU per rank, whose communicator's unique ID comes through mlrun:
//
//   mlrun --nproc_per_node=NGPUS --no_python build/examples/nccl_allreduce/nccl_allreduce
//
// Rank 0 makes the ID (ncclGetUniqueId, in its own process), mlrun's server hands the same 128
// bytes to every rank, and ncclCommInitRank joins them. Each rank contributes {rank + i}; the
// sum is checked on the host. Exits non-zero on a mismatch, on any error, and at once, with a
// message, where the host has no GPU (the job is aborted so no rank waits for it).
#include <cuda_runtime.h>
#include <nccl.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include <mlrun/rendezvous.hpp>

namespace {

namespace rdzv = mlrun::rendezvous;

constexpr int kElements = 1 << 20;

struct Failure {
  std::string what;
};

void check_cuda(cudaError_t e, const char* call) {
  if (e != cudaSuccess) throw Failure{std::string(call) + ": " + cudaGetErrorString(e)};
}

void check_nccl(ncclResult_t r, const char* call) {
  if (r != ncclSuccess) throw Failure{std::string(call) + ": " + ncclGetErrorString(r)};
}

int run(rdzv::Client& client) {
  const int rank = client.rank(), world = client.world_size();
  const int local_rank = client.local_rank() < 0 ? 0 : client.local_rank();
  int devices = 0;
  cudaError_t e = cudaGetDeviceCount(&devices);
  if (e != cudaSuccess || devices == 0) {
    std::string why = e != cudaSuccess ? cudaGetErrorString(e) : "0 devices";
    throw Failure{"no CUDA GPU on this host (cudaGetDeviceCount: " + why +
                  "); this example needs one GPU per rank. Without a GPU, "
                  "nccl_unique_id shows the ID exchange alone"};
  }
  check_cuda(cudaSetDevice(local_rank % devices), "cudaSetDevice");

  std::array<char, 128> id_bytes = client.nccl_unique_id("world");
  ncclUniqueId id;
  static_assert(sizeof(id.internal) == 128);
  std::memcpy(id.internal, id_bytes.data(), sizeof(id.internal));
  ncclComm_t comm;
  check_nccl(ncclCommInitRank(&comm, world, id, rank), "ncclCommInitRank");

  std::vector<float> host(kElements);
  for (int i = 0; i < kElements; ++i) host[i] = static_cast<float>(rank + (i % 1000));
  float* buffer = nullptr;
  check_cuda(cudaMalloc(&buffer, kElements * sizeof(float)), "cudaMalloc");
  check_cuda(cudaMemcpy(buffer, host.data(), kElements * sizeof(float), cudaMemcpyHostToDevice),
             "cudaMemcpy");
  cudaStream_t stream;
  check_cuda(cudaStreamCreate(&stream), "cudaStreamCreate");
  check_nccl(ncclAllReduce(buffer, buffer, kElements, ncclFloat, ncclSum, comm, stream),
             "ncclAllReduce");
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  check_cuda(cudaMemcpy(host.data(), buffer, kElements * sizeof(float), cudaMemcpyDeviceToHost),
             "cudaMemcpy");
  int wrong = 0;
  for (int i = 0; i < kElements; ++i) {
    // Small integers: exact in float.
    float expected = static_cast<float>(world * (world - 1) / 2 + world * (i % 1000));
    if (host[i] != expected && wrong++ < 5) {
      std::fprintf(stderr, "nccl_allreduce: rank %d: element %d is %g, expected %g\n", rank, i,
                   host[i], expected);
    }
  }
  cudaFree(buffer);
  cudaStreamDestroy(stream);
  ncclCommDestroy(comm);
  if (wrong > 0) throw Failure{std::to_string(wrong) + " elements wrong"};
  // Rank 0's process hosts NCCL's bootstrap root: it stays until every rank is done.
  client.barrier("nccl_allreduce/done");
  std::printf("nccl_allreduce: rank %d of %d on GPU %d: allreduce of %d floats correct\n", rank,
              world, local_rank % devices, kElements);
  return 0;
}

}  // namespace

int main() {
  try {
    auto client = rdzv::Client::from_env();
    client.set_timeout(std::chrono::minutes(2));
    try {
      return run(client);
    } catch (const Failure& f) {
      std::string reason = "nccl_allreduce: rank " + std::to_string(client.rank()) + ": " + f.what;
      std::fprintf(stderr, "%s\n", reason.c_str());
      client.abort(reason);  // The other ranks stop now instead of at their timeouts.
      return 1;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nccl_allreduce: %s\n", e.what());
    return 1;
  }
}
