// The running half of `mlrun doctor --bandwidth`, built into mlrun-allreduce-sweep only (never
// into mlrun): one backend's all-reduce behind SweepCollective, driven by one loop in
// bandwidth.cc that times every size, checks every value and prints the table. Gloo's lives in
// bandwidth.cc (where libgloo-dev is installed), NCCL's in nccl_sweep.cc, which loads the CUDA
// runtime and NCCL with dlopen, so that building and testing need no CUDA.
#pragma once

#include <cstddef>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "doctor/bandwidth.h"

namespace mlrun::rendezvous {
class Client;
}

namespace mlrun::doctor {

/// Why a rank cannot run its sweep: a library, a device or a call that failed. what() is the
/// cause for the user ("NCCL sweep needs a GPU: cudaGetDeviceCount: ..."); the caller adds the
/// rank and the host.
class SweepError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// One backend's all-reduce for the sweep. Every call is collective (every rank makes it, in the
/// same order) and bounded by the sweep's --op-timeout; failures throw.
class SweepCollective {
 public:
  virtual ~SweepCollective() = default;
  /// What is measured, for the table's title: "Gloo all-reduce (ring)".
  virtual std::string title() const = 0;
  /// Makes buffers of max_count floats; input element i is sweep_input(rank, i).
  virtual void prepare(std::size_t max_count) = 0;
  /// Overwrites the output, runs `warmup` all-reduces of count floats, waits for every rank, then
  /// runs `iters` timed ones; returns this rank's mean time of one, in microseconds.
  virtual double time_allreduce(std::size_t count, int warmup, int iters) = 0;
  /// The output of the last all-reduce (count floats), readable on the host.
  virtual const float* output(std::size_t count) = 0;
  /// An all-reduce of a few doubles over every rank, in place: the sum, or the max.
  virtual void reduce(std::vector<double>& values, bool max) = 0;
};

/// The libraries the NCCL sweep loads: the first of each list that dlopen finds.
struct NcclLibraryNames {
  std::vector<std::string> cudart = {"libcudart.so", "libcudart.so.13", "libcudart.so.12",
                                     "libcudart.so.11.0", "/usr/local/cuda/lib64/libcudart.so"};
  std::vector<std::string> nccl = {"libnccl.so.2", "libnccl.so"};
};

/// The NCCL sweep's collective on this rank's GPU: loads the libraries, checks for a GPU
/// (sweep_gpu of the local rank), gets the unique ID of communicator "mlrun_doctor_bw" through
/// the client, and joins it (ncclCommInitRank). Every step that can block is bounded by
/// o.timeout_s: past it the rank prints what it waited for and exits (status 1) — this runs in
/// a program of its own, and a call stuck inside CUDA or NCCL cannot be interrupted otherwise.
/// Throws SweepError when the sweep cannot run here.
std::unique_ptr<SweepCollective> make_nccl_collective(rendezvous::Client& client,
                                                      const SweepOptions& o,
                                                      const NcclLibraryNames& names = {});

/// Loads the CUDA runtime and NCCL from names, and every entry point the NCCL sweep calls; throws
/// SweepError naming what is missing. Exposed for the tests, which run without CUDA.
void load_nccl_libraries(const NcclLibraryNames& names);

}  // namespace mlrun::doctor
