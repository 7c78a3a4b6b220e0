// NCCL's all-reduce for `mlrun doctor --bandwidth --backend nccl` (doctor/sweep.h).
//
// No CUDA at build time: the CUDA runtime and NCCL are loaded with dlopen and only the entry
// points used here are declared, with the C types of cuda_runtime_api.h and nccl.h. Those are
// stable across releases (enums are ints, handles are pointers, ncclUniqueId is 128 bytes passed
// by value), and the constants below are their documented values.
//
// Not yet run on a GPU (docs/backends.md): tools/gpu-check.sh is the first run to make on one.
#include "doctor/sweep.h"

#include <dlfcn.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <mlrun/rendezvous.hpp>

#include "rendezvous/nccl_library.h"

namespace mlrun::doctor {
namespace {

using CudaError = int;  // cudaError_t
using CudaStream = void*;
using NcclResult = int;  // ncclResult_t
using NcclComm = void*;
struct NcclUniqueId {
  char internal[128];
};

constexpr CudaError kCudaSuccess = 0;
constexpr int kCudaMemcpyHostToDevice = 1;
constexpr int kCudaMemcpyDeviceToHost = 2;
constexpr NcclResult kNcclSuccess = 0;
constexpr int kNcclFloat32 = 7;
constexpr int kNcclFloat64 = 8;
constexpr int kNcclSum = 0;
constexpr int kNcclMax = 2;

struct NcclApi {
  CudaError (*cudaGetDeviceCount)(int*);
  CudaError (*cudaSetDevice)(int);
  const char* (*cudaGetErrorString)(CudaError);
  CudaError (*cudaMalloc)(void**, std::size_t);
  CudaError (*cudaFree)(void*);
  CudaError (*cudaMemcpy)(void*, const void*, std::size_t, int);
  CudaError (*cudaMemset)(void*, int, std::size_t);
  CudaError (*cudaStreamCreate)(CudaStream*);
  CudaError (*cudaStreamDestroy)(CudaStream);
  CudaError (*cudaStreamSynchronize)(CudaStream);
  NcclResult (*ncclGetVersion)(int*);
  const char* (*ncclGetErrorString)(NcclResult);
  NcclResult (*ncclCommInitRank)(NcclComm*, int, NcclUniqueId, int);
  NcclResult (*ncclAllReduce)(const void*, void*, std::size_t, int, int, NcclComm, CudaStream);
  NcclResult (*ncclCommDestroy)(NcclComm);
  NcclResult (*ncclCommAbort)(NcclComm);
  const char* (*ncclGetLastError)(NcclComm);  // NCCL 2.13 and later; may stay null.
  int nccl_version = 0;
};

void* open_first(const std::vector<std::string>& names, const char* what) {
  std::string last = "no names to try";
  for (const auto& name : names) {
    if (void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    const char* e = dlerror();
    last = e != nullptr ? e : name + ": cannot be loaded";
  }
  throw SweepError(
      fmt::format("NCCL sweep: cannot load {} (tried {}): {}", what, fmt::join(names, ", "), last));
}

// fn = the function name of a library: lookup(name) is its address, nullptr when it has none.
template <typename Lookup, typename Fn>
void bind(const Lookup& lookup, const char* name, Fn& fn, bool required = true) {
  fn = reinterpret_cast<Fn>(lookup(name));
  if (fn == nullptr && required) {
    throw SweepError(fmt::format("NCCL sweep: {} is not in the loaded library", name));
  }
}

NcclApi load_api(const NcclLibraryNames& names) {
  NcclApi a{};
  void* cudart_handle = open_first(names.cudart, "the CUDA runtime (libcudart)");
  auto cudart = [cudart_handle](const char* name) { return dlsym(cudart_handle, name); };
  bind(cudart, "cudaGetDeviceCount", a.cudaGetDeviceCount);
  bind(cudart, "cudaSetDevice", a.cudaSetDevice);
  bind(cudart, "cudaGetErrorString", a.cudaGetErrorString);
  bind(cudart, "cudaMalloc", a.cudaMalloc);
  bind(cudart, "cudaFree", a.cudaFree);
  bind(cudart, "cudaMemcpy", a.cudaMemcpy);
  bind(cudart, "cudaMemset", a.cudaMemset);
  bind(cudart, "cudaStreamCreate", a.cudaStreamCreate);
  bind(cudart, "cudaStreamDestroy", a.cudaStreamDestroy);
  bind(cudart, "cudaStreamSynchronize", a.cudaStreamSynchronize);
  NcclLibrary library(names.nccl);
  if (!library.loaded()) throw SweepError("NCCL sweep: " + library.error());
  // Both stay loaded for the life of the process: NCCL's threads run their code until exit.
  library.keep();
  auto nccl = [&library](const char* name) { return library.symbol(name); };
  bind(nccl, "ncclGetVersion", a.ncclGetVersion);
  bind(nccl, "ncclGetErrorString", a.ncclGetErrorString);
  bind(nccl, "ncclCommInitRank", a.ncclCommInitRank);
  bind(nccl, "ncclAllReduce", a.ncclAllReduce);
  bind(nccl, "ncclCommDestroy", a.ncclCommDestroy);
  bind(nccl, "ncclCommAbort", a.ncclCommAbort);
  bind(nccl, "ncclGetLastError", a.ncclGetLastError, /*required=*/false);
  if (a.ncclGetVersion(&a.nccl_version) != kNcclSuccess) a.nccl_version = 0;
  return a;
}

// Bounds the calls that can block without end (ncclCommInitRank waiting for a rank that never
// comes, a stream waiting on a collective whose peer died, a driver that hangs): past the
// deadline the rank says what it waited for and exits, and mlrun's supervisor ends the job as
// for any failed rank. A call stuck inside CUDA or NCCL cannot be interrupted from outside, and
// this is a program of its own (mlrun-allreduce-sweep), so exiting is its top level's choice.
class Watchdog {
 public:
  Watchdog(std::string who, int limit_s) : who_(std::move(who)), limit_s_(limit_s) {
    thread_ = std::thread([this] { loop(); });
  }
  ~Watchdog() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  /// Runs fn, which must end within the limit.
  template <typename Fn>
  void bounded(const std::string& what, Fn&& fn) {
    {
      std::lock_guard lock(mu_);
      what_ = what;
      deadline_ = std::chrono::steady_clock::now() + std::chrono::seconds(limit_s_);
    }
    cv_.notify_all();
    struct Disarm {
      Watchdog* w;
      ~Disarm() {
        std::lock_guard lock(w->mu_);
        w->deadline_.reset();
      }
    } disarm{this};  // Also when fn throws.
    fn();
  }

 private:
  void loop() {
    std::unique_lock lock(mu_);
    while (!stop_) {
      if (!deadline_) {
        cv_.wait(lock);
      } else if (cv_.wait_until(lock, *deadline_) == std::cv_status::timeout && deadline_ &&
                 std::chrono::steady_clock::now() >= *deadline_) {
        std::fprintf(stderr,
                     "allreduce-sweep: %s: NCCL sweep: %s did not finish within %d s "
                     "(--op-timeout)\n",
                     who_.c_str(), what_.c_str(), limit_s_);
        std::fflush(stderr);
        _exit(1);
      }
    }
  }

  std::string who_;
  int limit_s_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<std::chrono::steady_clock::time_point> deadline_;
  std::string what_;
  bool stop_ = false;
  std::thread thread_;
};

std::string rank_and_host(int rank) {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return fmt::format("rank {} on {}", rank, name);
}

class NcclCollective final : public SweepCollective {
 public:
  NcclCollective(rendezvous::Client& client, const SweepOptions& o, const NcclLibraryNames& names)
      : api_(load_api(names)),
        rank_(client.rank()),
        world_(client.world_size()),
        watchdog_(rank_and_host(client.rank()), o.timeout_s) {
    int devices = 0;
    CudaError e = kCudaSuccess;
    watchdog_.bounded("cudaGetDeviceCount", [&] { e = api_.cudaGetDeviceCount(&devices); });
    if (e != kCudaSuccess) {
      throw SweepError(fmt::format("NCCL sweep needs a GPU: cudaGetDeviceCount: {}",
                                   api_.cudaGetErrorString(e)));
    }
    if (devices <= 0) {
      throw SweepError("NCCL sweep needs a GPU: cudaGetDeviceCount found no device");
    }
    std::string why;
    std::optional<int> gpu =
        sweep_gpu(client.local_rank() < 0 ? 0 : client.local_rank(), devices, &why);
    if (!gpu) throw SweepError(fmt::format("NCCL sweep needs one GPU per rank: {}", why));
    gpu_ = *gpu;
    watchdog_.bounded("cudaSetDevice", [&] { cuda(api_.cudaSetDevice(gpu_), "cudaSetDevice"); });
    cuda(api_.cudaStreamCreate(&stream_), "cudaStreamCreate");
    // Rank 0 makes the ID (its process must outlive every rank's ncclCommInitRank: the sweep's
    // last step is a barrier), mlrun's server hands it to the others.
    std::array<char, 128> id_bytes = client.nccl_unique_id("mlrun_doctor_bw");
    NcclUniqueId id;
    std::memcpy(id.internal, id_bytes.data(), sizeof(id.internal));
    watchdog_.bounded("ncclCommInitRank (waiting for every rank to join)", [&] {
      nccl(api_.ncclCommInitRank(&comm_, world_, id, rank_), "ncclCommInitRank");
    });
  }

  ~NcclCollective() override {
    // After a good run ncclCommDestroy waits for the communicator's work to end; after a failed
    // call ncclCommAbort does not wait, since a peer may be gone.
    if (comm_ != nullptr && failed_) {
      api_.ncclCommAbort(comm_);
    } else if (comm_ != nullptr) {
      watchdog_.bounded("ncclCommDestroy", [&] { api_.ncclCommDestroy(comm_); });
    }
    for (void* p : {in_, out_, scratch_}) {
      if (p != nullptr) api_.cudaFree(p);
    }
    if (stream_ != nullptr) api_.cudaStreamDestroy(stream_);
  }

  std::string title() const override {
    std::string version = decode_nccl_version(api_.nccl_version);
    return fmt::format("NCCL {} all-reduce, one GPU per rank",
                       version.empty() ? "(version unknown)" : version);
  }

  void prepare(std::size_t max_count) override {
    std::vector<float> host(max_count);
    for (std::size_t i = 0; i < max_count; ++i) host[i] = sweep_input(rank_, i);
    cuda(api_.cudaMalloc(&in_, max_count * sizeof(float)), "cudaMalloc");
    cuda(api_.cudaMalloc(&out_, max_count * sizeof(float)), "cudaMalloc");
    cuda(api_.cudaMalloc(&scratch_, 8 * sizeof(double)), "cudaMalloc");
    watchdog_.bounded("cudaMemcpy", [&] {
      cuda(api_.cudaMemcpy(in_, host.data(), max_count * sizeof(float), kCudaMemcpyHostToDevice),
           "cudaMemcpy");
    });
    host_out_.resize(max_count);
  }

  double time_allreduce(std::size_t count, int warmup, int iters) override {
    // 0xff bytes are NaN floats: a size whose all-reduce wrote nothing is counted wrong.
    cuda(api_.cudaMemset(out_, 0xff, count * sizeof(float)), "cudaMemset");
    std::string size = fmt::format("the all-reduce of {} floats", count);
    watchdog_.bounded(size + " (warm-up)", [&] {
      for (int w = 0; w < warmup; ++w) allreduce(in_, out_, count, kNcclFloat32, kNcclSum);
      // A one-element all-reduce ends on a rank only once every rank has started it: a barrier
      // on the same path as the measured traffic.
      allreduce(scratch_, scratch_, 1, kNcclFloat32, kNcclSum);
      sync();
    });
    double us = 0;
    watchdog_.bounded(size, [&] {
      auto t0 = std::chrono::steady_clock::now();
      for (int n = 0; n < iters; ++n) allreduce(in_, out_, count, kNcclFloat32, kNcclSum);
      sync();
      us =
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
          iters;
    });
    return us;
  }

  const float* output(std::size_t count) override {
    watchdog_.bounded("cudaMemcpy", [&] {
      cuda(api_.cudaMemcpy(host_out_.data(), out_, count * sizeof(float), kCudaMemcpyDeviceToHost),
           "cudaMemcpy");
    });
    return host_out_.data();
  }

  void reduce(std::vector<double>& values, bool max) override {
    if (values.size() > 8) throw SweepError("NCCL sweep: reduce of more than 8 values");
    std::size_t bytes = values.size() * sizeof(double);
    watchdog_.bounded(
        max ? "an all-reduce (max) of the times" : "an all-reduce (sum) of counts", [&] {
          cuda(api_.cudaMemcpy(scratch_, values.data(), bytes, kCudaMemcpyHostToDevice),
               "cudaMemcpy");
          allreduce(scratch_, scratch_, values.size(), kNcclFloat64, max ? kNcclMax : kNcclSum);
          sync();
          cuda(api_.cudaMemcpy(values.data(), scratch_, bytes, kCudaMemcpyDeviceToHost),
               "cudaMemcpy");
        });
  }

 private:
  void cuda(CudaError e, const char* call) {
    if (e != kCudaSuccess) {
      failed_ = true;
      throw SweepError(
          fmt::format("NCCL sweep: {} (GPU {}): {}", call, gpu_, api_.cudaGetErrorString(e)));
    }
  }

  void nccl(NcclResult r, const char* call) {
    if (r == kNcclSuccess) return;
    failed_ = true;
    std::string detail;
    if (api_.ncclGetLastError != nullptr) {
      const char* last = api_.ncclGetLastError(comm_);
      if (last != nullptr && *last != '\0') detail = fmt::format(" ({})", last);
    }
    throw SweepError(fmt::format("NCCL sweep: {} (GPU {}): {}{}", call, gpu_,
                                 api_.ncclGetErrorString(r), detail));
  }

  void allreduce(const void* in, void* out, std::size_t count, int type, int op) {
    nccl(api_.ncclAllReduce(in, out, count, type, op, comm_, stream_), "ncclAllReduce");
  }

  void sync() { cuda(api_.cudaStreamSynchronize(stream_), "cudaStreamSynchronize"); }

  NcclApi api_;
  int rank_;
  int world_;
  int gpu_ = -1;
  bool failed_ = false;  // A CUDA or NCCL call failed: the communicator is aborted, not destroyed.
  Watchdog watchdog_;
  CudaStream stream_ = nullptr;
  NcclComm comm_ = nullptr;
  void* in_ = nullptr;
  void* out_ = nullptr;
  void* scratch_ = nullptr;
  std::vector<float> host_out_;
};

}  // namespace

void load_nccl_libraries(const NcclLibraryNames& names) {
  load_api(names);
}

std::unique_ptr<SweepCollective> make_nccl_collective(rendezvous::Client& client,
                                                      const SweepOptions& o,
                                                      const NcclLibraryNames& names) {
  return std::make_unique<NcclCollective>(client, o, names);
}

}  // namespace mlrun::doctor
