#include "doctor/bandwidth.h"

#include "launcher/options.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <map>
#include <memory>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#ifdef MLRUN_SWEEP_PROGRAM
#include <mlrun/rendezvous.hpp>

#include "doctor/sweep.h"
#include "rendezvous/integer.h"
#endif

#ifdef MLRUN_HAVE_GLOO_SWEEP
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/transport/tcp/device.h>

#include <mlrun/gloo_store.hpp>
#endif

namespace mlrun::doctor {
namespace {

std::string bytes_text(std::size_t b) {
  if (b >= (1u << 30) && b % (1u << 30) == 0) return fmt::format("{} GiB", b >> 30);
  if (b >= (1u << 20) && b % (1u << 20) == 0) return fmt::format("{} MiB", b >> 20);
  if (b >= (1u << 10) && b % (1u << 10) == 0) return fmt::format("{} KiB", b >> 10);
  return fmt::format("{} B", b);
}

}  // namespace

std::string speed_text(int mbps) {
  if (mbps < 0) return "speed unknown";
  if (mbps >= 1000 && mbps % 1000 == 0) return fmt::format("{} Gb/s", mbps / 1000);
  if (mbps >= 1000) return fmt::format("{:.1f} Gb/s", mbps / 1000.0);
  return fmt::format("{} Mb/s", mbps);
}

std::optional<std::size_t> parse_byte_size(std::string_view text) {
  if (text.empty()) return std::nullopt;
  std::size_t mult = 1;
  char last = text.back();
  if (last == 'K' || last == 'k') mult = 1u << 10;
  if (last == 'M' || last == 'm') mult = 1u << 20;
  if (last == 'G' || last == 'g') mult = 1u << 30;
  if (mult != 1) text.remove_suffix(1);
  if (text.empty() || text.size() > 12) return std::nullopt;
  std::size_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + static_cast<std::size_t>(c - '0');
  }
  if (v == 0) return std::nullopt;
  return v * mult;
}

FlagTable sweep_flag_table(SweepOptions& o, std::vector<std::string>& errors) {
  auto size = [&errors](std::size_t& field) {
    return [&field, &errors](const std::string& flag, const std::string& v) {
      auto bytes = parse_byte_size(v);
      if (!bytes || *bytes > (std::size_t{8} << 30)) {
        errors.push_back(
            fmt::format("doctor: {} {}: expected a size such as 8, 64K, 128M, 1G", flag, v));
      } else {
        field = *bytes;
      }
    };
  };
  auto number = [&errors](int& field, int lo, int hi, std::string_view what) {
    return [&field, &errors, lo, hi, what](const std::string& flag, const std::string& v) {
      if (!parse_integer(v, field, lo, hi))
        errors.push_back(fmt::format("doctor: {} {}: expected {}", flag, v, what));
    };
  };
  return {
      {{"-b", "--minbytes"},
       "SIZE",
       "smallest message (default 8; K, M, G: powers of 1024)",
       size(o.min_bytes)},
      {{"-e", "--maxbytes"}, "SIZE", "largest message (default 128M)", size(o.max_bytes)},
      {{"-f", "--stepfactor"},
       "F",
       "each size F times the last (default 2)",
       number(o.factor, 2, 1024, "a factor from 2 to 1024")},
      {{"-n", "--iters"},
       "N",
       "timed iterations per size (default 20)",
       number(o.iters, 1, 1000000, "1 or more iterations")},
      {{"-w", "--warmup_iters"},
       "N",
       "untimed iterations before them (default 5)",
       number(o.warmup, 0, 1000000, "0 or more warm-up iterations")},
      {{"--op-timeout"},
       "SECONDS",
       "bound of every collective (default 300)",
       number(o.timeout_s, 1, 86400, "seconds (1 to 86400)")},
  };
}

void check_sweep_options(const SweepOptions& o, std::vector<std::string>& errors) {
  if (o.min_bytes > o.max_bytes) {
    errors.push_back(fmt::format("doctor: -b {} is larger than -e {}", bytes_text(o.min_bytes),
                                 bytes_text(o.max_bytes)));
  }
}

std::vector<std::string> sweep_flags(const SweepOptions& o) {
  return {"-b", std::to_string(o.min_bytes), "-e",           std::to_string(o.max_bytes),
          "-f", std::to_string(o.factor),    "-n",           std::to_string(o.iters),
          "-w", std::to_string(o.warmup),    "--op-timeout", std::to_string(o.timeout_s)};
}

std::vector<std::size_t> sweep_sizes(const SweepOptions& o) {
  std::vector<std::size_t> sizes;
  for (std::size_t b = o.min_bytes; b <= o.max_bytes; b *= static_cast<std::size_t>(o.factor)) {
    sizes.push_back(std::max<std::size_t>(4, b / 4 * 4));
    if (b > o.max_bytes / static_cast<std::size_t>(o.factor)) break;  // No overflow.
  }
  return sizes;
}

double allreduce_bus_bandwidth(double algbw, int ranks) {
  if (ranks < 1) return 0;
  return algbw * 2.0 * (ranks - 1) / ranks;
}

SweepRow make_sweep_row(std::size_t bytes, double time_us, int ranks, long wrong) {
  SweepRow row;
  row.bytes = bytes;
  row.time_us = time_us;
  row.algbw = time_us > 0 ? static_cast<double>(bytes) / (time_us * 1e3) : 0;  // B/us/1e3 = GB/s
  row.busbw = allreduce_bus_bandwidth(row.algbw, ranks);
  row.wrong = wrong;
  return row;
}

float sweep_input(int rank, std::size_t i) {
  return static_cast<float>((rank + 1) * static_cast<int>(i % 13 + 1));
}

float sweep_expected(int world, std::size_t i) {
  return static_cast<float>(world * (world + 1) / 2 * static_cast<int>(i % 13 + 1));
}

std::optional<int> sweep_gpu(int local_rank, int devices, std::string* why) {
  if (local_rank >= 0 && local_rank < devices) return local_rank;
  *why = fmt::format(
      "LOCAL_RANK {} has no GPU of its own: this process sees {} GPU{} (CUDA_VISIBLE_DEVICES "
      "narrows them); run at most {} rank{} per node",
      local_rank, devices, devices == 1 ? "" : "s", devices, devices == 1 ? "" : "s");
  return std::nullopt;
}

std::string decode_nccl_version(int code) {
  if (code <= 0) return "";
  // NCCL_VERSION(X,Y,Z): X*1000+Y*100+Z before 2.9, X*10000+Y*100+Z since.
  if (code >= 10000) return fmt::format("{}.{}.{}", code / 10000, code % 10000 / 100, code % 100);
  return fmt::format("{}.{}.{}", code / 1000, code % 1000 / 100, code % 100);
}

const char* sweep_iface_variable(std::string_view backend) {
  return backend == "nccl" ? "NCCL_SOCKET_IFNAME" : "GLOO_SOCKET_IFNAME";
}

std::string sweep_table_header() {
  return "#                                                  out-of-place\n"
         "#       size         count      type   redop      time   algbw   busbw  #wrong\n"
         "#        (B)    (elements)                        (us)  (GB/s)  (GB/s)\n";
}

std::string sweep_table_row(const SweepRow& r) {
  return fmt::format("{:>12}  {:>12}  {:>8}  {:>6}  {:>8.1f}  {:>6.2f}  {:>6.2f}  {:>6}\n", r.bytes,
                     r.bytes / 4, "float", "sum", r.time_us, r.algbw, r.busbw, r.wrong);
}

std::vector<std::string> link_verdict(double peak_busbw, std::size_t peak_bytes,
                                      std::size_t max_bytes, bool one_host,
                                      const std::vector<RankLink>& links, bool* warn,
                                      std::string_view backend) {
  std::vector<std::string> out;
  *warn = false;
  if (one_host) {
    out.push_back(fmt::format(
        "# every rank ran on one host: the data crossed no network link, so these numbers "
        "measure this host ({}), not a link; give -H/--hostfile to measure the network",
        backend == "nccl" ? "NVLink, PCIe or shared memory" : "memory copies, loopback TCP"));
    return out;
  }
  // One entry per host: the ranks of a host share its interface.
  std::vector<RankLink> hosts;
  for (const auto& l : links) {
    if (std::none_of(hosts.begin(), hosts.end(),
                     [&](const RankLink& h) { return h.host == l.host; })) {
      hosts.push_back(l);
    }
  }
  std::string listed;
  for (const auto& h : hosts) {
    if (!listed.empty()) listed += "; ";
    listed += fmt::format("{} {} {}", h.host, h.iface.empty() ? "(interface unknown)" : h.iface,
                          speed_text(h.speed_mbps));
  }
  out.push_back(fmt::format("# links: {}", listed));
  const RankLink* slowest = nullptr;
  for (const auto& h : hosts) {
    if (h.iface.empty()) {
      out.push_back(fmt::format(
          "# link speed unknown: the interface of {} is not known ({} is not set there), so the "
          "bus bandwidth is not compared with a link rate",
          h.host, sweep_iface_variable(backend)));
      return out;
    }
    if (h.speed_mbps < 0) {
      out.push_back(fmt::format(
          "# link speed unknown: {} on {} reports no speed (/sys/class/net/{}/speed; virtual "
          "and some cloud interfaces do not), so the bus bandwidth is not compared with a link "
          "rate",
          h.iface, h.host, h.iface));
      return out;
    }
    if (slowest == nullptr || h.speed_mbps < slowest->speed_mbps) slowest = &h;
  }
  if (slowest == nullptr) return out;
  double link_gbs = slowest->speed_mbps / 8000.0;
  double percent = link_gbs > 0 ? 100.0 * peak_busbw / link_gbs : 0;
  if (peak_busbw < 0.5 * link_gbs) {
    *warn = true;
    out.push_back(fmt::format(
        "# WARNING: peak bus bandwidth {:.3f} GB/s (at {}) is {:.1f}% of the slowest chosen "
        "link, {} on {} at {} ({:.3f} GB/s): far below its rate. Check that mlrun chose the "
        "fast interface on every host (mlrun doctor -H ...), the MTU, and what else uses the "
        "link",
        peak_busbw, bytes_text(peak_bytes), percent, slowest->iface, slowest->host,
        speed_text(slowest->speed_mbps), link_gbs));
    if (max_bytes < (64u << 20)) {
      out.push_back(fmt::format(
          "# note: the sweep stopped at {}; small messages are latency-bound and never reach "
          "link rate, so run the full sweep (-e 128M) before trusting this warning",
          bytes_text(max_bytes)));
    }
  } else {
    out.push_back(fmt::format(
        "# peak bus bandwidth {:.3f} GB/s is {:.1f}% of the slowest chosen link ({} "
        "on {} at {})",
        peak_busbw, percent, slowest->iface, slowest->host, speed_text(slowest->speed_mbps)));
  }
  return out;
}

#ifdef MLRUN_SWEEP_PROGRAM
namespace {

namespace rdzv = mlrun::rendezvous;
using Clock = std::chrono::steady_clock;

int sysfs_speed(const std::string& iface) {
  std::ifstream in("/sys/class/net/" + iface + "/speed");
  long v = -1;
  if (!(in >> v) || v <= 0 || v > 100000000) return -1;
  return static_cast<int>(v);
}

std::string this_host() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

#ifdef MLRUN_HAVE_GLOO_SWEEP
using ReduceFn = void (*)(void*, const void*, const void*, size_t);

// Gloo's ring all-reduce over TCP; pairs found through the job's rendezvous (GlooStore).
class GlooCollective final : public SweepCollective {
 public:
  GlooCollective(rdzv::Client& client, const SweepOptions& o, bool one_host)
      : rank_(client.rank()), timeout_(std::chrono::milliseconds(o.timeout_s * 1000L)) {
    rdzv::GlooStore store(client, "mlrun_doctor_bw");
    auto device = gloo::transport::tcp::CreateDevice(device_attr(one_host));
    context_ = std::make_shared<gloo::rendezvous::Context>(rank_, client.world_size());
    context_->setTimeout(timeout_);
    context_->connectFullMesh(store, device);
  }

  std::string title() const override { return "Gloo all-reduce (ring)"; }

  void prepare(std::size_t max_count) override {
    in_.resize(max_count);
    out_.resize(max_count);
    for (std::size_t i = 0; i < max_count; ++i) in_[i] = sweep_input(rank_, i);
  }

  double time_allreduce(std::size_t count, int warmup, int iters) override {
    std::fill(out_.begin(), out_.begin() + static_cast<long>(count), -1.0f);
    gloo::AllreduceOptions opts(context_);
    opts.setInput(in_.data(), count);
    opts.setOutput(out_.data(), count);
    opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    opts.setReduceFunction(static_cast<ReduceFn>(&gloo::sum<float>));
    opts.setTimeout(timeout_);
    for (int w = 0; w < warmup; ++w) gloo::allreduce(opts);
    gloo::BarrierOptions barrier(context_);
    barrier.setTimeout(timeout_);
    gloo::barrier(barrier);
    auto t0 = Clock::now();
    for (int n = 0; n < iters; ++n) gloo::allreduce(opts);
    return std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / iters;
  }

  const float* output(std::size_t) override { return out_.data(); }

  void reduce(std::vector<double>& v, bool max) override {
    gloo::AllreduceOptions opts(context_);
    opts.setOutput(v.data(), v.size());
    opts.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    opts.setReduceFunction(max ? static_cast<ReduceFn>(&gloo::max<double>)
                               : static_cast<ReduceFn>(&gloo::sum<double>));
    opts.setTimeout(timeout_);
    gloo::allreduce(opts);
  }

 private:
  // Gloo listens on GLOO_SOCKET_IFNAME (mlrun sets it to the interface it chose); without it,
  // on loopback when every rank is on this host, else on the host name's address.
  static gloo::transport::tcp::attr device_attr(bool one_host) {
    gloo::transport::tcp::attr attr;
    const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
    if (ifname != nullptr && *ifname != '\0') {
      attr.iface = ifname;
    } else if (one_host) {
      attr.hostname = "127.0.0.1";
    } else {
      attr.hostname = this_host();
    }
    return attr;
  }

  int rank_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<gloo::rendezvous::Context> context_;
  std::vector<float> in_, out_;
};
#endif

// Where this rank's traffic goes, published for the link comparison on rank 0.
void publish_link(rdzv::Client& client, int rank, const std::string& backend) {
  const char* ifname = std::getenv(sweep_iface_variable(backend));
  RankLink mine{this_host(), ifname ? ifname : "", ifname && *ifname ? sysfs_speed(ifname) : -1};
  client.set(fmt::format("mlrun_doctor_bw/link/{}", rank),
             nlohmann::json{{"host", mine.host}, {"iface", mine.iface}, {"speed", mine.speed_mbps}}
                 .dump());
}

// Every rank's published link, read on rank 0.
std::vector<RankLink> read_links(rdzv::Client& client, int world) {
  std::vector<RankLink> links;
  for (int r = 0; r < world; ++r) {
    auto j = nlohmann::json::parse(client.get(fmt::format("mlrun_doctor_bw/link/{}", r)));
    links.push_back({j.at("host").get<std::string>(), j.at("iface").get<std::string>(),
                     j.at("speed").get<int>()});
  }
  return links;
}

std::unique_ptr<SweepCollective> make_collective(rdzv::Client& client, const SweepOptions& o,
                                                 const std::string& backend, bool one_host) {
  if (backend == "nccl") return make_nccl_collective(client, o);
#ifdef MLRUN_HAVE_GLOO_SWEEP
  return std::make_unique<GlooCollective>(client, o, one_host);
#else
  (void)one_host;
  throw SweepError(
      "this mlrun was built without Gloo (libgloo-dev), so it has no Gloo sweep; "
      "--backend nccl measures with NCCL where there are GPUs");
#endif
}

// Rank 0's heading: what carries the data, on how many ranks and nodes, then the table's header.
void print_sweep_header(const SweepCollective& collective, const SweepOptions& o, int world,
                        bool one_host) {
  const char* groups = std::getenv("GROUP_WORLD_SIZE");
  int nnodes = one_host ? 1 : 0;  // 0 where GROUP_WORLD_SIZE is not a count: unknown.
  if (!one_host && groups != nullptr) parse_integer(std::string_view(groups), nnodes, 0);
  fmt::print(
      "# mlrun doctor --bandwidth: {}, {} rank{} on {} node{}, "
      "{} warm-up + {} timed iterations per size; time is the slowest rank's mean\n",
      collective.title(), world, world == 1 ? "" : "s", nnodes, nnodes == 1 ? "" : "s", o.warmup,
      o.iters);
  fmt::print("{}", sweep_table_header());
  std::fflush(stdout);
}

// This rank's wrong elements in the output of a count-element allreduce (the first few named).
long count_wrong(const float* out, std::size_t count, int world, int rank, std::size_t bytes) {
  long wrong = 0;
  for (std::size_t i = 0; i < count; ++i) {
    if (out[i] != sweep_expected(world, i)) {
      if (wrong++ < 3) {
        fmt::print(stderr, "allreduce-sweep: rank {}: {} B: element {} is {}, expected {}\n", rank,
                   bytes, i, out[i], sweep_expected(world, i));
      }
    }
  }
  return wrong;
}

// One size timed and checked on every rank: the slowest rank's time, every rank's wrong values.
SweepRow sweep_one_size(SweepCollective& collective, const SweepOptions& o, std::size_t bytes,
                        int world, int rank) {
  const std::size_t count = bytes / 4;
  double us = collective.time_allreduce(count, o.warmup, o.iters);
  long wrong = count_wrong(collective.output(count), count, world, rank, bytes);
  std::vector<double> slowest = {us};
  collective.reduce(slowest, true);
  std::vector<double> wrongs = {static_cast<double>(wrong)};
  collective.reduce(wrongs, false);
  return make_sweep_row(bytes, slowest[0], world, static_cast<long>(wrongs[0]));
}

// What the summary lines say, gathered row by row.
struct SweepTotals {
  long wrong = 0;
  double peak = 0, sum_busbw = 0;
  std::size_t peak_bytes = 0;
  std::size_t rows = 0;

  void add(const SweepRow& row) {
    wrong += row.wrong;
    sum_busbw += row.busbw;
    ++rows;
    if (row.busbw > peak) {
      peak = row.busbw;
      peak_bytes = row.bytes;
    }
  }
};

// Rank 0's summary: wrong values, average and peak bus bandwidth, and the link comparison.
void print_sweep_summary(const SweepTotals& t, const SweepOptions& o, bool one_host,
                         rdzv::Client& client, int world, const std::string& backend) {
  fmt::print("# Out of bounds values : {} {}\n", t.wrong, t.wrong == 0 ? "OK" : "FAILED");
  fmt::print("# Avg bus bandwidth    : {:.3f} GB/s\n",
             t.rows == 0 ? 0.0 : t.sum_busbw / static_cast<double>(t.rows));
  fmt::print("# Peak bus bandwidth   : {:.3f} GB/s at {}\n", t.peak, bytes_text(t.peak_bytes));
  const std::vector<RankLink> links = read_links(client, world);
  bool warn = false;
  for (const auto& line :
       link_verdict(t.peak, t.peak_bytes, o.max_bytes, one_host, links, &warn, backend)) {
    fmt::print("{}\n", line);
  }
  std::fflush(stdout);
}

// The sweep on this rank with the job's backend: the same sizes, timing, checks, table and link
// comparison whatever carries the data.
int run_sweep(const SweepOptions& o, const std::string& backend) {
  rdzv::Client client = rdzv::Client::from_env();
  client.set_timeout(std::chrono::milliseconds(o.timeout_s * 1000L));
  const int rank = client.rank();
  const int world = client.world_size();
  if (rank < 0 || world < 1) {
    fmt::print(stderr,
               "allreduce-sweep: RANK and WORLD_SIZE are not set (mlrun doctor "
               "--bandwidth starts this)\n");
    return 2;
  }
  const bool one_host = client.local_world_size() == world;
  publish_link(client, rank, backend);
  std::unique_ptr<SweepCollective> collective = make_collective(client, o, backend, one_host);
  std::vector<std::size_t> sizes = sweep_sizes(o);
  collective->prepare(sizes.empty() ? 1 : sizes.back() / 4);
  if (rank == 0) print_sweep_header(*collective, o, world, one_host);
  SweepTotals totals;
  for (std::size_t bytes : sizes) {
    SweepRow row = sweep_one_size(*collective, o, bytes, world, rank);
    totals.add(row);
    if (rank == 0) {
      fmt::print("{}", sweep_table_row(row));
      std::fflush(stdout);
    }
  }
  if (rank == 0) print_sweep_summary(totals, o, one_host, client, world, backend);
  // Nobody leaves while a peer may still read from its pairs (Gloo), or while NCCL's bootstrap
  // root, in rank 0's process, may still serve a peer.
  client.barrier("mlrun_doctor_bw/done");
  if (totals.wrong > 0) {
    if (rank == 0) fmt::print(stderr, "allreduce-sweep: {} wrong values\n", totals.wrong);
    return 1;
  }
  return 0;
}

}  // namespace
#endif

int allreduce_sweep_command(const std::vector<std::string>& args) {
  SweepOptions o;
  std::vector<std::string> errors;
  const FlagSyntax syntax = {
      [](const std::string& arg) {
        return fmt::format("doctor --allreduce-sweep: unknown argument '{}'", arg);
      },
      [](const std::string& written, const Flag&) {
        return fmt::format("doctor: {} needs a value", written);
      },
      [](const std::string& written, const Flag&) {
        return fmt::format("doctor: {} takes no value", written);
      },
  };
  parse_flags(sweep_flag_table(o, errors), args, syntax, errors);
  check_sweep_options(o, errors);
  for (const auto& e : errors) fmt::print(stderr, "mlrun: error: {}\n", e);
  if (!errors.empty()) return 2;
  const char* backend_env = std::getenv("MLRUN_BACKEND");
  std::string backend = backend_env != nullptr && *backend_env != '\0' ? backend_env : "gloo";
  const char* rank = std::getenv("RANK");
  bool rank0 = rank == nullptr || std::string(rank) == "0";
  if (backend == "mpi") {
    if (rank0) {
      fmt::print(stderr,
                 "mlrun: error: the bandwidth sweep has no MPI path; `mlrun doctor --bandwidth "
                 "--backend gloo` measures the same interfaces over TCP\n");
    }
    // Rank 0 alone says no and fails; the others end quietly, so that the job's first (and
    // only) failure is the one that says why, whatever order the ranks end in.
    return rank0 ? 2 : 0;
  }
#ifdef MLRUN_SWEEP_PROGRAM
  try {
    return run_sweep(o, backend);
  } catch (const std::exception& e) {
    // Each rank names itself: where every rank fails alike (no GPU anywhere), whichever ends
    // first is the job's first failure, and its line says enough.
    fmt::print(stderr, "allreduce-sweep: rank {} on {}: {}\n", rank ? rank : "?", this_host(),
               e.what());
    return 1;
  }
#else
  if (rank0) {
    fmt::print(stderr,
               "mlrun: error: the sweep's ranks run mlrun-allreduce-sweep (installed next to "
               "mlrun), not mlrun itself\n");
  }
  return rank0 ? 2 : 0;
#endif
}

}  // namespace mlrun::doctor
