#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace paci {

// The identity of one placement of a job, "<job>/<attempt>": stage links
// carry it, so frames of an earlier placement are never taken for the current.
inline std::string RunId(const std::string& job_name, int64_t attempt) {
  return absl::StrCat(job_name, "/", attempt);
}

// Whether a stage link stream naming `run` may be for a stage this worker is
// yet to attach while the stage of run `attached` is still here: a later
// attempt of its job (a restarted job's neighbour can be a moment faster than
// this worker's stop) or any attempt of another job (the next job's neighbour
// can be a moment faster than this worker's end of this one). Not `attached`
// itself, not an earlier attempt of its job and not what is no run id.
inline bool MayBeNextRun(const std::string& run, const std::string& attached) {
  const size_t a = run.rfind('/'), b = attached.rfind('/');
  int64_t run_attempt = 0, attached_attempt = 0;
  if (a == std::string::npos || a == 0 || b == std::string::npos ||
      !absl::SimpleAtoi(run.substr(a + 1), &run_attempt) ||
      !absl::SimpleAtoi(attached.substr(b + 1), &attached_attempt)) {
    return false;
  }
  const bool same_job = run.compare(0, a, attached, 0, b) == 0;
  return !same_job || run_attempt > attached_attempt;
}

}  // namespace paci
