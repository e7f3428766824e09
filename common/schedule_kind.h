#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace paci {

// The pipeline schedules, all run by the same stage runtime.
enum class ScheduleKind {
  kPaci,          // asynchronous 1F1B, step every a backwards, drift <= ceil((P-1-s)/a)
  kOneFOneBFlush, // 1F1B, stage 0 drains the pipe after every a micro-batches
  kGpipe,         // all forwards of a group of a, then all backwards, then flush
  kAsyncOneFOneB, // PACI with a = 1: the unbounded-drift baseline (PipeDream-style)
};

// "paci", "1f1b-flush", "gpipe", "async-1f1b". InvalidArgument otherwise.
absl::StatusOr<ScheduleKind> ParseScheduleKind(std::string_view name);
std::string ScheduleKindName(ScheduleKind kind);

// The most optimizer steps a micro-batch may cross between its forward and its
// backward at `stage`: ceil((P-1-s)/a) for the asynchronous schedules, 0 for
// the flushing ones.
int64_t DriftBound(ScheduleKind kind, int num_stages, int stage, int accumulation);

// The smallest accumulation a with ceil((P-1)/a) <= max_drift under paci: the
// accumulation a drift limit D asks for. 1 for one stage; 0 when no a can
// (D < 1 with more than one stage).
int AccumulationForDriftLimit(int num_stages, int max_drift);

}  // namespace paci
