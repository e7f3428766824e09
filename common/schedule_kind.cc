#include "common/schedule_kind.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace paci {

absl::StatusOr<ScheduleKind> ParseScheduleKind(std::string_view name) {
  if (name == "paci") return ScheduleKind::kPaci;
  if (name == "1f1b-flush") return ScheduleKind::kOneFOneBFlush;
  if (name == "gpipe") return ScheduleKind::kGpipe;
  if (name == "async-1f1b") return ScheduleKind::kAsyncOneFOneB;
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown schedule \"", std::string(name),
      "\"; expected one of paci, 1f1b-flush, gpipe, async-1f1b"));
}

std::string ScheduleKindName(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kPaci: return "paci";
    case ScheduleKind::kOneFOneBFlush: return "1f1b-flush";
    case ScheduleKind::kGpipe: return "gpipe";
    case ScheduleKind::kAsyncOneFOneB: return "async-1f1b";
  }
  return "unknown";
}

int64_t DriftBound(ScheduleKind kind, int num_stages, int stage, int accumulation) {
  if (kind == ScheduleKind::kOneFOneBFlush || kind == ScheduleKind::kGpipe) return 0;
  const int64_t a = kind == ScheduleKind::kAsyncOneFOneB ? 1 : accumulation;
  const int64_t overtakers = num_stages - 1 - stage;
  if (overtakers <= 0 || a <= 0) return 0;
  return (overtakers + a - 1) / a;
}

int AccumulationForDriftLimit(int num_stages, int max_drift) {
  const int64_t overtakers = int64_t{num_stages} - 1;
  if (overtakers <= 0) return 1;
  if (max_drift < 1) return 0;
  return static_cast<int>((overtakers + max_drift - 1) / max_drift);
}

}  // namespace paci
