#pragma once

// The schedule table: every pipeline schedule and every drift correction is one
// row here (kSchedules and kDriftCorrections in schedule_kind.cc), and every
// place that behaves differently per schedule reads its row: StageScheduler
// (flush, accumulation, in-flight limit, the last stage's rule, the drift
// bound), ApplyJobSpecDefaults (the accumulation a schedule derives),
// ValidateJobSpec (the schedule's own rules and the corrections it takes),
// StageModel (what a correction does). Adding a schedule or a correction is
// one row plus its tests (docs/contributing.md section 6).
//
// Pure data and pure functions: no tensors, no proto, thread-safe.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace paci {

// The pipeline schedules, all run by the same stage runtime. The enum names a
// row of the table; the row says what the schedule does.
enum class ScheduleKind {
  kPaci,          // asynchronous 1F1B, step every a backwards, drift <= ceil((P-1-s)/a)
  kOneFOneBFlush, // 1F1B, stage 0 drains the pipe after every a micro-batches
  kGpipe,         // all forwards of a group of a, then all backwards, then flush
  kAsyncOneFOneB, // PACI with a = 1: the unbounded-drift baseline (PipeDream-style)
};

// The numbers of pipeline.* that a schedule's own rules read: a PipelineSpec's,
// without the proto (so that the workers' scheduler needs none).
struct PipelineShape {
  int num_stages = 1;            // P
  int accumulation = 0;          // a; 0 when the spec leaves it out
  std::optional<int> max_drift;  // D, when the spec gives it
};

// One row of the schedule table: everything that tells one schedule from the
// others. Every function pointer is set (a rule a schedule lacks is one that
// accepts everything).
struct ScheduleTraits {
  ScheduleKind kind;
  // Its pipeline.schedule spelling.
  const char* name;
  // Stage 0 drains the pipe at every optimizer step, so nothing ever crosses
  // a step (drift bound 0).
  bool flushes;
  // The accumulation the scheduler runs with, from pipeline.accumulation as
  // given (at least 1).
  int (*effective_accumulation)(int accumulation);
  // The most micro-batches between forward and backward at `stage`, from the
  // effective accumulation.
  int (*in_flight_limit)(int num_stages, int stage, int effective_accumulation);
  // The last stage runs its backwards only once the whole group of a is
  // forwarded (GPipe); otherwise each right after its forward (1F1B).
  bool last_stage_waits_for_group;
  // The most optimizer steps a micro-batch may cross between its forward and
  // its backward at `stage`, from pipeline.accumulation as given.
  int64_t (*drift_bound)(int num_stages, int stage, int accumulation);
  // ApplyJobSpecDefaults: pipeline.accumulation when the spec leaves it out;
  // 0 leaves it unset (the validator then asks for it).
  int (*default_accumulation)(const PipelineShape& pipeline);
  // ValidateJobSpec: the schedule's own rule on pipeline.accumulation, once
  // it is within [1, 4096]. InvalidArgument naming the field.
  absl::Status (*check_accumulation)(const PipelineShape& pipeline);
  // ValidateJobSpec: the schedule's own refusal of pipeline.max_drift (given,
  // within [0, 4096]), where `drift` is its drift bound at stage 0 (the
  // largest): D below it, or a D that no accumulation meets. InvalidArgument
  // naming the field.
  absl::Status (*check_drift_limit)(const PipelineShape& pipeline, int64_t drift);
  // The automatic default (ApplyJobSpecDefaults), what a spec that leaves
  // them out gets, from what docs/benchmarks.md measured: the drift
  // correction (a row's name of the correction table) and the synchronous
  // warm-up's steps of a run of `steps`, at P = num_stages with the
  // effective accumulation `accumulation`.
  const char* (*default_correction)(int num_stages);
  int64_t (*default_warmup_steps)(int num_stages, int accumulation, int64_t steps);
};

// A set of schedules, one bit per ScheduleKind.
using ScheduleSet = uint32_t;
constexpr ScheduleSet ScheduleBit(ScheduleKind kind) {
  return ScheduleSet{1} << static_cast<int>(kind);
}
inline constexpr ScheduleSet kEverySchedule = ~ScheduleSet{0};

// One row of the drift-correction table (pipeline.drift_correction): what it
// does to a stage's updates, and which schedules take it. Which corrections a
// schedule takes is said here, once, and read from either side by
// DriftCorrectionAllowed.
struct DriftCorrectionTraits {
  // Its pipeline.drift_correction spelling.
  const char* name;
  // The schedules that accept it; the others refuse it (ValidateJobSpec,
  // naming pipeline.drift_correction).
  ScheduleSet schedules;
  // The weight of a backward's gradient that crossed `drift` optimizer steps
  // (1: unweighted).
  double (*gradient_weight)(int64_t drift);
  // The factor of a stage's learning rate, from the stage's drift bound (1:
  // unchanged).
  double (*lr_factor)(int64_t drift_bound);
  // Weight prediction: how many optimizer steps ahead along AdamW's update
  // direction a forward's weights are extrapolated, from the steps its
  // backward will have crossed (0: the forward runs on the weights as they
  // are).
  int64_t (*prediction_steps)(int64_t steps_ahead);
  // Delay compensation: DC-ASGD's lambda, the weight of the Taylor term that
  // moves a step's gradient to the weights it is applied to (0: none).
  double delay_compensation;
};

// The rows, in the order their names are listed in messages: paci first (the
// default), then 1f1b-flush, gpipe, async-1f1b.
absl::Span<const ScheduleTraits> Schedules();
// The row of `kind`.
const ScheduleTraits& ScheduleTraitsOf(ScheduleKind kind);

// The drift corrections, "none" (the default, every schedule's) first.
absl::Span<const DriftCorrectionTraits> DriftCorrections();
// The row named `name`, the default ("none") for an empty name; nullptr for
// an unknown one.
const DriftCorrectionTraits* FindDriftCorrection(std::string_view name);
bool DriftCorrectionAllowed(const DriftCorrectionTraits& correction, ScheduleKind kind);

// The names of the schedules in `set`, in table order, joined: "paci,
// 1f1b-flush, gpipe, async-1f1b" with ", ". And of every drift correction,
// the last after " or ": "none, staleness or stage-lr".
std::string ScheduleNames(ScheduleSet set, std::string_view separator);
std::string DriftCorrectionNames();

// "paci", "1f1b-flush", "gpipe", "async-1f1b": a row's name. InvalidArgument
// otherwise, listing the names.
absl::StatusOr<ScheduleKind> ParseScheduleKind(std::string_view name);
std::string ScheduleKindName(ScheduleKind kind);

// The row's drift_bound: the most optimizer steps a micro-batch may cross
// between its forward and its backward at `stage`: ceil((P-1-s)/a) for the
// asynchronous schedules, 0 for the flushing ones.
int64_t DriftBound(ScheduleKind kind, int num_stages, int stage, int accumulation);

// The smallest accumulation a with ceil((P-1)/a) <= max_drift under paci: the
// accumulation a drift limit D asks for. 1 for one stage; 0 when no a can
// (D < 1 with more than one stage).
int AccumulationForDriftLimit(int num_stages, int max_drift);

}  // namespace paci
