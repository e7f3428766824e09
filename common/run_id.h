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

// Whether `run` is a later attempt of the job of `than`: "j/3" of "j/2", not
// "j/2" of "j/2", "k/3" of "j/2" or anything that is not a run id.
inline bool IsLaterRun(const std::string& run, const std::string& than) {
  const size_t a = run.rfind('/'), b = than.rfind('/');
  if (a == std::string::npos || b == std::string::npos || run.compare(0, a, than, 0, b) != 0) {
    return false;
  }
  int64_t run_attempt = 0, than_attempt = 0;
  return absl::SimpleAtoi(run.substr(a + 1), &run_attempt) &&
         absl::SimpleAtoi(than.substr(b + 1), &than_attempt) && run_attempt > than_attempt;
}

}  // namespace paci
