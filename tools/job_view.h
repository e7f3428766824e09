#pragma once

#include "absl/time/time.h"
#include "paci/v1/coordinator.pb.h"
#include "paci/v1/summary.pb.h"
#include "tools/progress_printer.h"

namespace paci {

// The live progress of a job as the coordinator reports it, as of `now` (the
// ETA extrapolates the step rate since the job started). Pure.
ProgressView ViewOfJob(const v1::Job& job, absl::Time now);

// The run summary of a job (finished or not): settings, losses, per-stage
// drift, busy and idle time, memory. `wall_seconds` is the caller's clock.
v1::RunSummary SummaryOfJob(const v1::Job& job, double wall_seconds);

// One line per job, as `pacictl list` prints them, under a header:
// NAME PHASE STEP LOSS VAL-LOSS TOK/S MAX-DRIFT RESTARTS AGE.
std::string FormatJobTable(const std::vector<v1::Job>& jobs, absl::Time now);

// `pacictl get`: the job's phase, reason, message, conditions and stages.
std::string FormatJobDetails(const v1::Job& job, absl::Time now);

}  // namespace paci
