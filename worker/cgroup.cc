#include "worker/cgroup.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>
#include <vector>

#include <fmt/format.h>

#include "worker/lifeline.h"
#include "worker/log.h"
#include "worker/text_file.h"

namespace mlrun {
namespace {

namespace fs = std::filesystem;

std::string read_text(const std::string& path) {
  return read_text_file(path).value_or("");
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape_mountinfo(std::string_view field) {
  std::string out;
  for (std::size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size()) {
      int v = 0;
      bool octal = true;
      for (std::size_t k = 1; k <= 3; ++k) {
        char c = field[i + k];
        if (c < '0' || c > '7') octal = false;
        v = v * 8 + (c - '0');
      }
      if (octal) {
        out.push_back(static_cast<char>(v));
        i += 3;
        continue;
      }
    }
    out.push_back(field[i]);
  }
  return out;
}

std::vector<std::string_view> split_spaces(std::string_view line) {
  std::vector<std::string_view> fields;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ') ++i;
    std::size_t start = i;
    while (i < line.size() && line[i] != ' ') ++i;
    if (i > start) fields.push_back(line.substr(start, i - start));
  }
  return fields;
}

// Calls fn(line) for each line of text, without its newline; stops when fn returns true.
template <typename Fn>
void for_each_line(std::string_view text, Fn fn) {
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    if (fn(text.substr(start, end - start))) return;
    start = end + 1;
  }
}

bool cgroup_off() {
  const char* v = std::getenv("MLRUN_CGROUP");
  if (v == nullptr) return false;
  std::string s = v;
  return s == "off" || s == "0" || s == "no" || s == "false";
}

// Our own cgroup's directory, or empty with *reason set.
std::string own_cgroup_directory(std::string* reason) {
  if (cgroup_off()) {
    *reason = "turned off (MLRUN_CGROUP=off)";
    return {};
  }
  auto mount = parse_cgroup2_mount(read_text("/proc/self/mountinfo"));
  if (!mount) {
    *reason = "no cgroup2 file system is mounted (/proc/self/mountinfo)";
    return {};
  }
  auto own = parse_own_cgroup(read_text("/proc/self/cgroup"));
  if (!own) {
    *reason = "this process is in no cgroup v2 (no 0:: line in /proc/self/cgroup)";
    return {};
  }
  std::string dir = cgroup_directory(*mount, *own);
  if (dir.empty()) {
    *reason = fmt::format("our cgroup {} is outside the cgroup2 mount at {} (root {})", *own,
                          mount->mount_point, mount->root);
    return {};
  }
  // Moving a worker from our cgroup into a child needs write access to the common ancestor's
  // cgroup.procs: ours.
  if (access((dir + "/cgroup.procs").c_str(), W_OK) != 0) {
    *reason = fmt::format("cannot write {}/cgroup.procs: {}", dir, std::strerror(errno));
    return {};
  }
  return dir;
}

std::string survivors(const std::string& dir) {
  std::string procs = read_text(dir + "/cgroup.procs");
  std::string list;
  std::istringstream in(procs);
  std::string pid;
  int n = 0;
  while (in >> pid) {
    if (n++ < 8) list += (list.empty() ? "" : " ") + pid;
  }
  if (n > 8) list += " ...";
  return list.empty() ? std::string("(in child cgroups)") : list;
}

}  // namespace

std::optional<Cgroup2Mount> parse_cgroup2_mount(std::string_view mountinfo) {
  std::optional<Cgroup2Mount> found;
  for_each_line(mountinfo, [&](std::string_view line) {
    // ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS
    auto fields = split_spaces(line);
    std::size_t dash = 0;
    for (std::size_t i = 6; i < fields.size() && dash == 0; ++i) {
      if (fields[i] == "-") dash = i;
    }
    if (dash == 0 || dash + 1 >= fields.size() || fields[dash + 1] != "cgroup2") return false;
    found = Cgroup2Mount{unescape_mountinfo(fields[4]), unescape_mountinfo(fields[3])};
    return true;
  });
  return found;
}

std::optional<std::string> parse_own_cgroup(std::string_view text) {
  std::optional<std::string> found;
  for_each_line(text, [&](std::string_view line) {
    if (line.substr(0, 4) != "0::/") return false;
    found = std::string(line.substr(3));
    return true;
  });
  return found;
}

std::string cgroup_directory(const Cgroup2Mount& mount, const std::string& path) {
  std::string rest;
  if (mount.root == "/") {
    rest = path;
  } else if (path == mount.root) {
    rest = "/";
  } else if (path.compare(0, mount.root.size() + 1, mount.root + "/") == 0) {
    rest = path.substr(mount.root.size());
  } else {
    return {};
  }
  // "/foo (deleted)": our cgroup was removed under us.
  if (rest.find(" (deleted)") != std::string::npos) return {};
  std::string dir = mount.mount_point;
  if (rest != "/") dir += rest;
  return dir;
}

std::string cgroup_name_part(std::string_view job_id) {
  std::string out;
  for (char c : job_id.substr(0, 64)) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-';
    out.push_back(ok ? c : '_');
  }
  if (out.empty() || out == "." || out == "..") out = "job";
  return out;
}

std::string CgroupSupport::describe() const {
  return reason.empty() ? fmt::format("cgroup v2 at {}", parent)
                        : fmt::format("process groups: {}", reason);
}

CgroupSupport probe_cgroup_support() {
  CgroupSupport s;
  auto probe = JobCgroup::create("probe", &s.reason);
  if (probe) s.parent = fs::path(probe->path()).parent_path();
  return s;
}

std::unique_ptr<JobCgroup> JobCgroup::create(std::string_view job_id, std::string* reason) {
  std::string parent = own_cgroup_directory(reason);
  if (parent.empty()) return nullptr;
  std::string base = fmt::format("{}/mlrun-{}-{}", parent, cgroup_name_part(job_id), getpid());
  std::string path = base;
  // A name taken (a leftover of a process that had our pid): the next free suffix.
  for (int n = 1; mkdir(path.c_str(), 0755) != 0; ++n) {
    if (errno != EEXIST || n > 16) {
      *reason = fmt::format("cannot create a cgroup in {}: {}", parent, std::strerror(errno));
      return nullptr;
    }
    path = fmt::format("{}.{}", base, n);
  }
  if (access((path + "/cgroup.kill").c_str(), F_OK) != 0) {
    rmdir(path.c_str());
    *reason = fmt::format("{} has no cgroup.kill (Linux 5.14 or later needed)", parent);
    return nullptr;
  }
  std::unique_ptr<JobCgroup> cgroup(new JobCgroup(std::move(path)));
  // The first attempt's leaf now: what cannot be made is said before anything starts.
  if (!cgroup->open_attempt(reason)) return nullptr;
  return cgroup;
}

bool JobCgroup::open_attempt(std::string* error) {
  if (leaf_procs_fd_ >= 0) return true;
  leaf_ = fmt::format("{}/attempt-{}", path_, attempts_++);
  if (mkdir(leaf_.c_str(), 0755) != 0 && errno != EEXIST) {
    *error = fmt::format("cannot create the cgroup {}: {}", leaf_, std::strerror(errno));
    return false;
  }
  leaf_dir_fd_ = open(leaf_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  leaf_procs_fd_ = open((leaf_ + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
  if (leaf_procs_fd_ < 0) {
    *error = fmt::format("cannot open {}/cgroup.procs: {}", leaf_, std::strerror(errno));
    close_leaf();
    return false;
  }
  return true;
}

void JobCgroup::close_leaf() {
  if (leaf_dir_fd_ >= 0) close(leaf_dir_fd_);
  if (leaf_procs_fd_ >= 0) close(leaf_procs_fd_);
  leaf_dir_fd_ = leaf_procs_fd_ = -1;
  // Busy (a survivor of kill_all): left for the destructor's removal of the whole tree.
  if (!leaf_.empty()) rmdir(leaf_.c_str());
  leaf_.clear();
}

JobCgroup::~JobCgroup() {
  close_leaf();
  if (!kill_and_remove_cgroup(path_, std::chrono::seconds(5))) {
    fmt::print(stderr, "mlrun: warning: cannot remove the job's cgroup {}: {}\n", path_,
               std::strerror(errno));
  } else if (lifeline_ != nullptr) {
    lifeline_->kill_cgroup_on_exit("");
  }
}

void JobCgroup::watch_by(Lifeline& lifeline) {
  lifeline_ = &lifeline;
  lifeline.kill_cgroup_on_exit(path_);
}

std::unique_ptr<JobCgroup> make_node_cgroup(std::string_view job_id, Lifeline& lifeline) {
  std::string reason;
  auto cgroup = JobCgroup::create(job_id, &reason);
  if (!cgroup) {
    log::info("teardown: process groups: {}", reason);
    return nullptr;
  }
  log::info("teardown: cgroup v2 at {}", cgroup->path());
  cgroup->watch_by(lifeline);
  return cgroup;
}

bool JobCgroup::kill_all(std::chrono::milliseconds timeout) {
  bool ok = kill_cgroup(path_, timeout);
  if (!ok) {
    fmt::print(stderr,
               "mlrun: warning: processes of the job's cgroup {} outlived SIGKILL for {} ms: {}\n",
               path_, timeout.count(), leaf_.empty() ? std::string("?") : survivors(leaf_));
  }
  close_leaf();
  return ok;
}

}  // namespace mlrun
