#pragma once

#include <string>
#include <vector>

#include "absl/time/time.h"

namespace paci {

// Passes the output of the worker processes on, a whole line at a time, each
// line prefixed with its worker's tag (e.g. "[stage 1] "), so that the lines
// of different workers never interleave mid-line and the launcher can print
// them above its progress line. Reads pipes it does not own (see
// ChildProcesses::output_fd); a line longer than kMaxLine is passed on in
// pieces.
//
// Not thread-safe: owned by the launcher's loop.
class WorkerLogRelay {
 public:
  static constexpr size_t kMaxLine = 64 * 1024;

  // Reads `fd` (the read end of a worker's output pipe) from now on and
  // prefixes its lines with `prefix`. The fd must stay open while the relay
  // reads it: until Drain() returns or the pipe has reached its end.
  void Add(int fd, std::string prefix);

  // Waits up to `timeout` for output (or the end of a pipe), reads what is
  // there and returns the complete lines, prefixed, without their '\n'.
  // Returns as soon as something was read. With no pipe left open it just
  // waits `timeout`.
  std::vector<std::string> Poll(absl::Duration timeout);

  // Reads every pipe to its end, waiting at most `timeout` in all, and
  // returns the remaining lines, an unterminated last line included. Call
  // once the workers have exited.
  std::vector<std::string> Drain(absl::Duration timeout);

  // Some pipe has not reached its end yet.
  bool open() const;

 private:
  struct Source {
    int fd;
    std::string prefix;
    std::string partial;  // the start of a line whose '\n' has not come yet
    bool open = true;
  };

  // Reads once from `source` and moves its complete lines to `lines`.
  void ReadFrom(Source& source, std::vector<std::string>* lines);

  std::vector<Source> sources_;
};

}  // namespace paci
