#include "launcher/log_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

namespace mlrun {
namespace {

namespace fs = std::filesystem;

}  // namespace

std::string unsafe_because(const std::string& path) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return std::strerror(errno);
  if (!S_ISDIR(st.st_mode)) return "not a directory";
  if (st.st_uid != geteuid()) return fmt::format("owned by uid {}, not by this user", st.st_uid);
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return fmt::format("group or world writable (mode {:o}): another user could plant files in it",
                       st.st_mode & 07777);
  }
  return {};
}

namespace {

// A job id as part of a file name: what is not [A-Za-z0-9._-] becomes '_'.
std::string file_name_part(const std::string& s) {
  std::string out = s.substr(0, 64);
  for (char& c : out) {
    bool plain = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                 c == '.' || c == '_' || c == '-';
    if (!plain) c = '_';
  }
  return out;
}

// mkdir that accepts an existing directory only when it is a real one (no symlink) and ours.
bool make_own_dir(const std::string& path) {
  if (mkdir(path.c_str(), 0755) == 0) return true;
  if (errno != EEXIST) return false;
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return false;
  if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid()) {
    errno = S_ISLNK(st.st_mode) ? ELOOP : EPERM;
    return false;
  }
  return true;
}

}  // namespace

std::string log_dir_problem(const std::string& dir) {
  std::error_code ec;
  if (dir.empty() || !std::filesystem::exists(dir, ec)) return {};
  std::string unsafe = unsafe_because(dir);
  return unsafe.empty()
             ? unsafe
             : fmt::format("--log_dir {}: {}; name a directory of your own", dir, unsafe);
}

std::string prepare_log_dir(const std::string& given, const std::string& job_id, std::string& why) {
  if (given.empty()) {
    std::error_code ec;
    std::string base = fs::temp_directory_path(ec).string();
    if (ec) base = "/tmp";
    std::string tmpl = fmt::format("{}/mlrun-logs-{}-XXXXXX", base, file_name_part(job_id));
    if (mkdtemp(tmpl.data()) == nullptr) {
      why = fmt::format("cannot create a log directory in {}: {}", base, std::strerror(errno));
      return {};
    }
    return tmpl;
  }
  std::error_code ec;
  if (!fs::exists(given, ec)) {
    fs::path parent = fs::path(given).parent_path();
    if (!parent.empty()) fs::create_directories(parent, ec);
    if (mkdir(given.c_str(), 0755) != 0 && errno != EEXIST) {
      why = fmt::format("--log_dir {}: cannot create it: {}", given, std::strerror(errno));
      return {};
    }
  }
  // Checked after creating too: someone else may have made it first.
  why = log_dir_problem(given);
  return why.empty() ? given : std::string();
}

bool make_rank_dir(const std::string& root, int attempt, int rank) {
  std::string attempt_dir = fmt::format("{}/attempt_{}", root, attempt);
  return make_own_dir(attempt_dir) && make_own_dir(fmt::format("{}/{}", attempt_dir, rank));
}

int open_log_file(const std::string& path) {
  return open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644);
}

}  // namespace mlrun
