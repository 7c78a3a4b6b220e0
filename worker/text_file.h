// A whole small text file (/proc, /sys, cgroup files, dpkg's status) read into a string.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <optional>
#include <string>
#include <string_view>

#include "rendezvous/integer.h"

namespace mlrun {

/// The file's contents; nullopt when it cannot be opened or read (a /sys attribute of a link
/// that is down, such as `speed`, fails its read with EINVAL).
///
/// With read(2), not a stream: a process's first file stream builds the C++ locale, about
/// 0.5 ms here, and every head, agent and lifeline would pay it for a few small files
/// (docs/launcher.md, "Start-up").
inline std::optional<std::string> read_text_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string text;
  char buffer[4096];
  while (true) {
    ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n > 0) {
      text.append(buffer, static_cast<std::size_t>(n));
    } else if (n == 0) {
      break;
    } else if (errno != EINTR) {
      ::close(fd);
      return std::nullopt;
    }
  }
  ::close(fd);
  return text;
}

/// The integer a small file holds (a /sys attribute: "1000\n", "+2"), else nullopt: the file
/// cannot be read, or holds anything else.
inline std::optional<int> read_int_file(const std::string& path) {
  std::optional<std::string> text = read_text_file(path);
  if (!text) return std::nullopt;
  std::string_view digits = *text;
  while (!digits.empty() && (digits.back() == '\n' || digits.back() == ' ')) {
    digits.remove_suffix(1);
  }
  if (!digits.empty() && digits.front() == '+') digits.remove_prefix(1);
  int value = 0;
  if (!parse_integer(digits, value)) return std::nullopt;
  return value;
}

}  // namespace mlrun
