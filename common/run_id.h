#pragma once

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"

namespace paci {

// The identity of one placement of a job, "<job>/<attempt>": stage links
// carry it, so frames of an earlier placement are never taken for the current.
inline std::string RunId(const std::string& job_name, int64_t attempt) {
  return absl::StrCat(job_name, "/", attempt);
}

}  // namespace paci
