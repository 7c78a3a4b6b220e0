// Rank 0's stdin when the launcher's stdin is a terminal. Workers lead their own process groups,
// so one that read the terminal would be stopped by SIGTTIN; instead the launcher reads the
// terminal on its loop, while it is the terminal's foreground process group, and writes what it
// reads into a pipe that is the worker's stdin. Any other stdin (a file, a pipe, a socket) is
// handed to the worker as it is (SpawnRequest::stdin_fd) and needs none of this.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>

#include "worker/process.h"

namespace boost::asio {
class io_context;
}

namespace mlrun {

/// Bytes read from the terminal at once; also the most held for a pipe that is full (the
/// terminal is not read again until the pipe has taken them).
inline constexpr std::size_t kStdinChunk = 4096;
/// How often a launcher that is not the terminal's foreground process group looks again.
inline constexpr std::chrono::milliseconds kForegroundPoll{200};

/// Forwards a terminal into a pipe, for one process at a time, on the loop of io. Ignores
/// SIGTTIN in this process (workers reset it): a launcher moved to the background gets EIO,
/// stops reading, and reads again once it is in the foreground. The terminal's end of file
/// (Ctrl-D) is stdin's end for the job: the pipe is closed, and so is every later one.
class TerminalForwarder {
 public:
  /// terminal: a descriptor of the terminal; it is duplicated, the caller keeps its own.
  /// Throws SpawnError when it cannot be duplicated.
  TerminalForwarder(boost::asio::io_context& io, int terminal);
  TerminalForwarder(const TerminalForwarder&) = delete;
  TerminalForwarder& operator=(const TerminalForwarder&) = delete;
  ~TerminalForwarder();

  /// A fresh pipe; returns its read end (close-on-exec, the caller's to close) for a process's
  /// stdin. The terminal's input goes there from now on; the previous pipe is closed, and what
  /// it had not taken is dropped. Throws SpawnError when no pipe can be made.
  int new_pipe();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// A spawner over inner that starts a process whose request.stdin_fd is a terminal with a pipe
/// from a TerminalForwarder (made on first use, on io's loop) instead; every other request goes
/// to inner unchanged. Spawn only on io's thread.
std::unique_ptr<ProcessSpawner> make_terminal_stdin_spawner(boost::asio::io_context& io,
                                                            ProcessSpawner& inner);

}  // namespace mlrun
