#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "paci/v1/summary.pb.h"

namespace paci {

// The RunSummary as indented JSON with the proto field names and every
// field, defaults included. Unlike plain proto3 JSON, 64-bit integers are
// numbers rather than strings, so scripts can compare them; the summary's
// counts stay far below 2^53. JsonStringToMessage reads it back.
absl::StatusOr<std::string> RunSummaryToJson(const v1::RunSummary& summary);

}  // namespace paci
