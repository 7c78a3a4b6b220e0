// `mlrun doctor --bandwidth` (issue 5 item 5): an all-reduce sweep across the planned ranks, run
// through mlrun itself, printed as nccl-tests' all_reduce_perf prints it, and compared with the
// link speed of the interface mlrun chose.
//
// doctor re-executes `mlrun [--hostfile F | -H L] [--nproc_per_node N] --no_python mlrun doctor
// --allreduce-sweep ...`: every rank runs allreduce_sweep_command(), finds the others through the
// job's rendezvous (Client::from_env) and runs the backend's all-reduce (out of place, float32
// sum): Gloo's ring over TCP (GlooStore), or NCCL on the rank's GPU (doctor/sweep.h; CUDA and
// NCCL loaded with dlopen). Rank 0 prints the table. Each rank runs the separate program
// mlrun-allreduce-sweep (bandwidth_main.cc), so the launcher never loads Gloo or CUDA.
//
// The arithmetic and the formatting are pure and unit-tested; only the sweep itself talks to
// the network and the GPU.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "launcher/flags.h"

namespace mlrun::doctor {

/// The sweep's parameters, with nccl-tests' spellings (-b -e -f -n -w).
struct SweepOptions {
  std::size_t min_bytes = 8;           ///< -b / --minbytes
  std::size_t max_bytes = 128u << 20;  ///< -e / --maxbytes
  int factor = 2;                      ///< -f / --stepfactor
  int iters = 20;                      ///< -n / --iters: timed iterations per size.
  int warmup = 5;                      ///< -w / --warmup_iters: untimed ones before them.
  int timeout_s = 300;                 ///< --op-timeout: bound of every collective, seconds.
};

/// "8", "64K", "1M", "128M", "1G" (powers of 1024, as nccl-tests reads them). nullopt when the
/// text is not such a size or is 0.
std::optional<std::size_t> parse_byte_size(std::string_view text);

/// The sweep's flags (-b -e -f -n -w --op-timeout), writing into o; a bad value appends to
/// errors. `mlrun doctor` adds them to its own table.
FlagTable sweep_flag_table(SweepOptions& o, std::vector<std::string>& errors);

/// Checks the options as a whole (min <= max, factor >= 2, ...); appends to errors.
void check_sweep_options(const SweepOptions& o, std::vector<std::string>& errors);

/// The flags that reproduce o, for the re-executed sweep.
std::vector<std::string> sweep_flags(const SweepOptions& o);

/// The message sizes: min, min*f, ... up to max, each rounded down to whole float32 elements
/// (at least one).
std::vector<std::size_t> sweep_sizes(const SweepOptions& o);

/// nccl-tests' bus bandwidth of an all-reduce: algbw * 2(n-1)/n.
double allreduce_bus_bandwidth(double algbw, int ranks);

/// One measured size.
struct SweepRow {
  std::size_t bytes = 0;
  double time_us = 0;  ///< Mean time of one all-reduce (the slowest rank's).
  double algbw = 0;    ///< GB/s (1e9 bytes): bytes / time.
  double busbw = 0;    ///< GB/s: algbw * 2(n-1)/n.
  long wrong = 0;      ///< Elements with a wrong result, summed over every rank.
};

/// The row of one size: bandwidths from the slowest rank's mean time over `ranks` ranks.
SweepRow make_sweep_row(std::size_t bytes, double time_us, int ranks, long wrong);

/// Element i of rank r's input: (r + 1) * (i % 13 + 1), small integers, so that every float sum
/// is exact; sweep_expected is their sum over `world` ranks.
float sweep_input(int rank, std::size_t i);
float sweep_expected(int world, std::size_t i);

/// The GPU of a rank of the NCCL sweep: its local rank, which must name one of the `devices`
/// this process sees (one GPU per rank, as NCCL requires). nullopt, with *why, when it does not.
std::optional<int> sweep_gpu(int local_rank, int devices, std::string* why);

/// The header lines of the table ('#' lines, as all_reduce_perf prints them).
std::string sweep_table_header();
/// One line of the table.
std::string sweep_table_row(const SweepRow& row);

/// The interface one rank's traffic took: GLOO_SOCKET_IFNAME (NCCL_SOCKET_IFNAME for NCCL)
/// there and its sysfs speed.
struct RankLink {
  std::string host;
  std::string iface;    ///< Empty: not known (the variable is unset).
  int speed_mbps = -1;  ///< -1: sysfs gives none.
};

/// A link speed as people write it: "100 Gb/s", "2.5 Gb/s", "100 Mb/s"; "speed unknown" below 0.
std::string speed_text(int mbps);

/// What the peak bus bandwidth says about the links. one_host: every rank ran on one host, so
/// no link was crossed. Returns lines to print; *warn is set when the bandwidth is far below
/// (under half of) the slowest link's rate. backend ("gloo" or "nccl") names the interface
/// variable and what carries the data within one host.
std::vector<std::string> link_verdict(double peak_busbw, std::size_t peak_bytes,
                                      std::size_t max_bytes, bool one_host,
                                      const std::vector<RankLink>& links, bool* warn,
                                      std::string_view backend = "gloo");

/// ncclGetVersion's code as "major.minor.patch": 2.9 and later encode X*10000+Y*100+Z, older
/// ones X*1000+Y*100+Z. Empty for 0 or less.
std::string decode_nccl_version(int code);

/// The environment variable that names the interface of a backend's traffic.
const char* sweep_iface_variable(std::string_view backend);

/// `mlrun doctor --allreduce-sweep [sweep flags]`, run by every rank of the job that
/// `mlrun doctor --bandwidth` launches (in mlrun-allreduce-sweep; the launcher's own copy only
/// refuses). MLRUN_BACKEND picks Gloo or NCCL. 0: every value checked right; 1: wrong values or
/// an error (printed as "rank R on HOST: cause"); 2: usage or a backend it cannot measure.
int allreduce_sweep_command(const std::vector<std::string>& args);

}  // namespace mlrun::doctor
