// The cgroup teardown that the lifeline runs too (worker/cgroup.h): apart from the rest of
// cgroup.cc, so that the mlrun-lifeline program links this, lifeline.cc and the C++ library
// only (launcher/CMakeLists.txt), no logging and no name resolution.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string>
#include <thread>

#include "worker/cgroup.h"
#include "worker/text_file.h"

namespace mlrun {
namespace {

bool populated(const std::string& dir) {
  std::string events = read_text_file(dir + "/cgroup.events").value_or("");
  // A cgroup that is gone holds nothing.
  if (events.empty()) return false;
  return events.find("populated 1") != std::string::npos;
}

// Removes dir's child cgroups, deepest first, then dir (cgroups are removed with rmdir only).
bool remove_cgroup_tree(const std::string& dir) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.is_directory(ec) && !entry.is_symlink(ec)) remove_cgroup_tree(entry.path());
  }
  return rmdir(dir.c_str()) == 0 || errno == ENOENT;
}

}  // namespace

bool kill_cgroup(const std::string& dir, std::chrono::milliseconds timeout) {
  if (!populated(dir)) return true;
  int fd = open((dir + "/cgroup.kill").c_str(), O_WRONLY | O_CLOEXEC);
  if (fd >= 0) {
    while (write(fd, "1", 1) < 0 && errno == EINTR) {
    }
    close(fd);
  }
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (populated(dir)) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return true;
}

bool kill_and_remove_cgroup(const std::string& dir, std::chrono::milliseconds timeout) {
  kill_cgroup(dir, timeout);
  return remove_cgroup_tree(dir);
}

}  // namespace mlrun
