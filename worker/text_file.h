// A whole small text file (/proc, /sys, cgroup files, dpkg's status) read into a string.
#pragma once

#include <fstream>
#include <optional>
#include <sstream>
#include <string>

namespace mlrun {

/// The file's contents; nullopt when it cannot be opened.
inline std::optional<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace mlrun
