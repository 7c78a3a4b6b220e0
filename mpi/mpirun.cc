#include "mpi/mpirun.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include <fmt/format.h>

#include "worker/env.h"

namespace mlrun::mpi {
namespace {

bool valid_variable_name(std::string_view name) {
  if (name.empty() || (name[0] >= '0' && name[0] <= '9')) return false;
  for (char c : name) {
    bool ok =
        (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) return false;
  }
  return true;
}

bool valid_host(std::string_view host) {
  if (host.empty() || host[0] == '-') return false;
  for (char c : host) {
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '#' || c == '\0') return false;
  }
  return true;
}

void check_job(const MpiJob& job) {
  if (job.hosts.empty()) throw std::invalid_argument("--backend mpi: the plan has no hosts");
  if (job.argv.empty()) throw std::invalid_argument("--backend mpi: no program to run");
  long slots = 0;
  for (const auto& h : job.hosts) {
    if (!valid_host(h.host)) {
      throw std::invalid_argument(fmt::format(
          "--backend mpi: host '{}' cannot be written to an Open MPI hostfile", h.host));
    }
    if (h.slots < 1) {
      throw std::invalid_argument(
          fmt::format("--backend mpi: host {} has {} slots; it needs at least 1", h.host, h.slots));
    }
    slots += h.slots;
  }
  if (job.world_size < 1 || job.world_size > slots) {
    throw std::invalid_argument(fmt::format(
        "--backend mpi: {} ranks planned on hosts with {} slots in all", job.world_size, slots));
  }
  auto check_names = [](const auto& vars) {
    for (const auto& [name, value] : vars) {
      if (!valid_variable_name(name)) {
        throw std::invalid_argument(
            fmt::format("--backend mpi: '{}' is not a variable name mpirun -x can export", name));
      }
    }
  };
  check_names(job.overrides);
  check_names(job.defaults);
}

bool parse_integer(std::string_view s, int& out) {
  if (s.empty() || s.size() > 9) return false;
  int v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  out = v;
  return true;
}

// The tag "[JOB,RANK]<STREAM>:" at the start of s; its length, or 0 when s does not start with
// one.
std::size_t match_tag(std::string_view s, int& rank, MpiStream& stream) {
  if (s.empty() || s[0] != '[') return 0;
  auto comma = s.find(',');
  auto close = s.find(']');
  if (comma == std::string_view::npos || close == std::string_view::npos || comma > close) {
    return 0;
  }
  int job = 0;
  if (!parse_integer(s.substr(1, comma - 1), job)) return 0;
  if (!parse_integer(s.substr(comma + 1, close - comma - 1), rank)) return 0;
  std::string_view rest = s.substr(close + 1);
  static constexpr std::pair<std::string_view, MpiStream> kStreams[] = {
      {"<stdout>:", MpiStream::kStdout},
      {"<stderr>:", MpiStream::kStderr},
      {"<stddiag>:", MpiStream::kStddiag},
  };
  for (const auto& [name, kind] : kStreams) {
    if (rest.substr(0, name.size()) == name) {
      stream = kind;
      return close + 1 + name.size();
    }
  }
  return 0;
}

}  // namespace

MpiCommand build_mpirun_command(const MpiJob& job) {
  check_job(job);
  MpiCommand cmd;
  cmd.hostfile_path =
      (job.hostfile_dir.empty() ? std::string(".") : job.hostfile_dir) + "/hostfile";
  bool oversubscribe = false;
  int remaining = job.world_size;
  for (const auto& h : job.hosts) {
    cmd.hostfile_text += fmt::format("{} slots={}\n", h.host, h.slots);
    int ranks = std::min(remaining, h.slots);
    remaining -= ranks;
    if (h.cores > 0 && ranks > h.cores) oversubscribe = true;
  }

  // Values travel in mpirun's environment; -x NAME makes mpirun hand each one to every rank,
  // remote ones included.
  Environment env(job.base_env);
  std::vector<std::string> exported;
  auto export_name = [&exported](const std::string& name) {
    for (const auto& e : exported) {
      if (e == name) return;
    }
    exported.push_back(name);
  };
  for (const auto& [name, value] : job.overrides) {
    env.set(name, value);
    export_name(name);
  }
  for (const auto& [name, value] : job.defaults) {
    env.set_default(name, value);
    export_name(name);
  }
  for (const auto& name : job.inherit) {
    // -x of an unset name makes mpirun warn; a name it lacks is simply not carried.
    if (env.get(name) != nullptr) export_name(name);
  }

  auto& a = cmd.argv;
  a.push_back(job.mpirun);
  if (job.as_root) a.push_back("--allow-run-as-root");
  a.insert(a.end(), {"--hostfile", cmd.hostfile_path, "-np", std::to_string(job.world_size),
                     "--map-by", "slot", "--bind-to", "none"});
  if (oversubscribe) a.push_back("--oversubscribe");
  a.push_back("--tag-output");
  if (!job.prefix.empty()) a.insert(a.end(), {"--prefix", job.prefix});
  for (const auto& name : exported) a.insert(a.end(), {"-x", name});
  a.push_back("--");
  a.insert(a.end(), job.argv.begin(), job.argv.end());
  cmd.env = env.entries();
  return cmd;
}

void write_mpi_hostfile(const MpiCommand& command) {
  std::ofstream out(command.hostfile_path, std::ios::trunc);
  if (out) out << command.hostfile_text;
  if (out) out.flush();
  if (!out) {
    throw std::runtime_error(
        fmt::format("cannot write {}: {}", command.hostfile_path, std::strerror(errno)));
  }
}

std::vector<MpiOutputPiece> parse_mpi_output_line(std::string_view line) {
  std::vector<MpiOutputPiece> pieces;
  int rank = -1;
  MpiStream stream = MpiStream::kUntagged;
  std::size_t tag = match_tag(line, rank, stream);
  if (tag == 0) {
    pieces.push_back({-1, MpiStream::kUntagged, line});
    return pieces;
  }
  std::size_t start = tag;
  // Scan for the next tag after this piece's text: a rank's unterminated last write.
  for (std::size_t i = start; i < line.size(); ++i) {
    if (line[i] != '[') continue;
    int next_rank = -1;
    MpiStream next_stream = MpiStream::kUntagged;
    std::size_t next = match_tag(line.substr(i), next_rank, next_stream);
    if (next == 0) continue;
    pieces.push_back({rank, stream, line.substr(start, i - start)});
    rank = next_rank;
    stream = next_stream;
    start = i + next;
    i = start - 1;
  }
  pieces.push_back({rank, stream, line.substr(start)});
  return pieces;
}

}  // namespace mlrun::mpi
