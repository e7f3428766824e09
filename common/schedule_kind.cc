#include "common/schedule_kind.h"

#include <algorithm>
#include <cmath>
#include <cstddef>

#include "absl/strings/str_cat.h"

namespace paci {
namespace {

// ---- The rules the rows are made of.

// ceil((P-1-s)/a): the micro-batches that can overtake one at stage s (at
// most P-1-s are in flight ahead of it) cross a step every a backwards.
int64_t CeilOvertakersOverAccumulation(int num_stages, int stage, int accumulation) {
  const int64_t a = accumulation;
  const int64_t overtakers = int64_t{num_stages} - 1 - stage;
  if (overtakers <= 0 || a <= 0) return 0;
  return (overtakers + a - 1) / a;
}

// async-1f1b steps after every backward, whatever pipeline.accumulation says.
int64_t CeilOvertakers(int num_stages, int stage, int accumulation) {
  return CeilOvertakersOverAccumulation(num_stages, stage, 1);
}

int64_t NeverDrifts(int num_stages, int stage, int accumulation) { return 0; }

int AccumulationAsGiven(int accumulation) { return std::max(1, accumulation); }
int AccumulationOne(int accumulation) { return 1; }

// The 1F1B family: at most P - s micro-batches between forward and backward
// at stage s.
int OneFOneBInFlight(int num_stages, int stage, int effective_accumulation) {
  return num_stages - stage;
}
// GPipe keeps a whole group of a in flight.
int GroupInFlight(int num_stages, int stage, int effective_accumulation) {
  return effective_accumulation;
}

int NoDefaultAccumulation(const PipelineShape& p) { return 0; }
int DefaultAccumulationOne(const PipelineShape& p) { return 1; }

absl::Status AnyAccumulation(const PipelineShape& p) { return absl::OkStatus(); }
absl::Status AccumulationMustBeOne(const PipelineShape& p) {
  if (p.accumulation == 1) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "pipeline.accumulation: must be 1 with schedule async-1f1b, got ", p.accumulation));
}

// A drift limit the accumulation does not keep: names the smallest one that does.
absl::Status AccumulationWithinDriftLimit(const PipelineShape& p, int64_t drift) {
  const int D = *p.max_drift;
  if (drift <= D) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "pipeline.max_drift: accumulation ", p.accumulation, " lets a micro-batch cross ceil(",
      p.num_stages - 1, "/", p.accumulation, ") = ", drift,
      " optimizer steps at stage 0, more than max_drift ", D, "; use accumulation of at least ",
      AccumulationForDriftLimit(p.num_stages, D),
      " (for the same global batch, a smaller micro_batch_size)"));
}

// paci: as above, and a limit of 0 needs one stage (0 is the flush).
absl::Status PaciDriftLimit(const PipelineShape& p, int64_t drift) {
  if (AccumulationForDriftLimit(p.num_stages, *p.max_drift) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pipeline.max_drift: 0 with schedule paci needs a single stage (a drift of 0 is the "
        "flush: use schedule 1f1b-flush), got ", p.num_stages, " stages"));
  }
  return AccumulationWithinDriftLimit(p, drift);
}

// async-1f1b: no accumulation helps; paci is the schedule that has one.
absl::Status AsyncDriftLimit(const PipelineShape& p, int64_t drift) {
  const int D = *p.max_drift;
  if (drift <= D) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "pipeline.max_drift: async-1f1b lets a micro-batch cross P-1 = ", drift,
      " optimizer steps at stage 0, more than max_drift ", D, "; use schedule paci"));
}

// The automatic default of the drifting schedules, measured over three seeds
// at P = 2, 4 and 8 on two corpora (docs/benchmarks.md, "Closing the gap"):
// weight prediction, after a synchronous warm-up where the weights move
// fastest and a prediction from the young moments misleads. One stage never
// drifts: nothing to correct.
const char* PredictWhereItDrifts(int num_stages) { return num_stages > 1 ? "predict" : "none"; }
// The warm-up grows with the share of forwards whose backward crosses an
// optimizer step: at stage s, min(a, P-1-s) of every a micro-batches, so a
// share S = sum_s min(a, P-1-s) / (a P) of the pipeline's (1/8 at P = 2,
// a = 4; 1/2 at P = 4, a = 3 and at P = 8, a = 7). The first 0.8 S of the
// run, at most half of it, runs at drift 0: a tenth at P = 2, a = 4, four
// tenths at P = 4 and 8, the warm-ups that brought the gap to the flush
// within 0.5% there. Rounded up, in 128 bits: the defaults run before
// validation, on any steps.
int64_t WarmupByStaleShare(int num_stages, int accumulation, int64_t steps) {
  if (num_stages <= 1 || steps <= 0) return 0;
  const __int128 a = std::max(accumulation, 1), last = num_stages - 1;
  // sum over the stages of min(a, P-1-s) = sum of min(a, k) for k in [0, P-1]
  const __int128 crossing = last <= a ? last * (last + 1) / 2 : a * (a + 1) / 2 + (last - a) * a;
  const __int128 numerator = __int128{steps} * 4 * crossing;
  const __int128 denominator = 5 * a * num_stages;
  const __int128 warmup = (numerator + denominator - 1) / denominator;
  return static_cast<int64_t>(std::min<__int128>(warmup, (__int128{steps} + 1) / 2));
}
// The flushes never drift: no correction, no warm-up.
const char* NoCorrection(int num_stages) { return "none"; }
int64_t NoWarmup(int num_stages, int accumulation, int64_t steps) { return 0; }

// ---- The schedule table: one row per schedule, in ScheduleKind's order
// (checked below); the order in which messages list the names.
//
// kind, name, flushes, effective accumulation, in-flight limit, last stage
// waits for the group, drift bound, default accumulation, accumulation rule,
// drift-limit rule, default correction, default warm-up.
constexpr ScheduleTraits kSchedules[] = {
    {ScheduleKind::kPaci, "paci", /*flushes=*/false, AccumulationAsGiven, OneFOneBInFlight,
     /*last_stage_waits_for_group=*/false, CeilOvertakersOverAccumulation,
     NoDefaultAccumulation, AnyAccumulation, PaciDriftLimit, PredictWhereItDrifts,
     WarmupByStaleShare},
    {ScheduleKind::kOneFOneBFlush, "1f1b-flush", /*flushes=*/true, AccumulationAsGiven,
     OneFOneBInFlight, /*last_stage_waits_for_group=*/false, NeverDrifts, NoDefaultAccumulation,
     AnyAccumulation, AccumulationWithinDriftLimit, NoCorrection, NoWarmup},
    {ScheduleKind::kGpipe, "gpipe", /*flushes=*/true, AccumulationAsGiven, GroupInFlight,
     /*last_stage_waits_for_group=*/true, NeverDrifts, NoDefaultAccumulation, AnyAccumulation,
     AccumulationWithinDriftLimit, NoCorrection, NoWarmup},
    {ScheduleKind::kAsyncOneFOneB, "async-1f1b", /*flushes=*/false, AccumulationOne,
     OneFOneBInFlight, /*last_stage_waits_for_group=*/false, CeilOvertakers,
     DefaultAccumulationOne, AccumulationMustBeOne, AsyncDriftLimit, PredictWhereItDrifts,
     WarmupByStaleShare},
};

constexpr bool RowsInEnumOrder() {
  for (size_t i = 0; i < sizeof(kSchedules) / sizeof(kSchedules[0]); ++i) {
    if (static_cast<size_t>(kSchedules[i].kind) != i) return false;
  }
  return true;
}
static_assert(RowsInEnumOrder(), "kSchedules' rows must follow ScheduleKind's order");

// ---- What the drift corrections do.

double Unweighted(int64_t drift) { return 1.0; }
// Staleness-aware asynchronous SGD: 1/(1+d).
double WeightByStaleness(int64_t drift) { return 1.0 / (1.0 + static_cast<double>(drift)); }

double SameLearningRate(int64_t drift_bound) { return 1.0; }
// Smaller steps where the weights drift more: 1/sqrt(1 + bound).
double LearningRateByDriftBound(int64_t drift_bound) {
  return 1.0 / std::sqrt(1.0 + static_cast<double>(drift_bound));
}

int64_t NoPrediction(int64_t steps_ahead) { return 0; }
// SpecTrain's and XPipe's weight prediction: the forward runs on the weights
// the backward will meet, predicted from the optimizer's own direction.
int64_t PredictTheSteps(int64_t steps_ahead) { return steps_ahead; }

// ---- The drift-correction table: "none" (the default) first.
//
// The asynchronous schedules: the ones whose micro-batches cross steps.
constexpr ScheduleSet kDrifting =
    ScheduleBit(ScheduleKind::kPaci) | ScheduleBit(ScheduleKind::kAsyncOneFOneB);

// name, schedules that take it, gradient weight, learning-rate factor,
// prediction steps, delay compensation (DC-ASGD-a's lambda_0 of 2).
constexpr DriftCorrectionTraits kDriftCorrections[] = {
    {"none", kEverySchedule, Unweighted, SameLearningRate, NoPrediction, 0.0},
    {"staleness", ScheduleBit(ScheduleKind::kPaci), WeightByStaleness, SameLearningRate,
     NoPrediction, 0.0},
    {"stage-lr", ScheduleBit(ScheduleKind::kPaci), Unweighted, LearningRateByDriftBound,
     NoPrediction, 0.0},
    {"predict", kDrifting, Unweighted, SameLearningRate, PredictTheSteps, 0.0},
    {"delay-comp", kDrifting, Unweighted, SameLearningRate, NoPrediction, 2.0},
};

}  // namespace

absl::Span<const ScheduleTraits> Schedules() { return kSchedules; }

const ScheduleTraits& ScheduleTraitsOf(ScheduleKind kind) {
  // Every enumerator has its row (RowsInEnumOrder); a value cast from
  // elsewhere gets the default's.
  const size_t index = static_cast<size_t>(kind);
  return index < Schedules().size() ? kSchedules[index] : kSchedules[0];
}

absl::Span<const DriftCorrectionTraits> DriftCorrections() { return kDriftCorrections; }

const DriftCorrectionTraits* FindDriftCorrection(std::string_view name) {
  if (name.empty()) return &kDriftCorrections[0];
  for (const DriftCorrectionTraits& correction : kDriftCorrections) {
    if (name == correction.name) return &correction;
  }
  return nullptr;
}

bool DriftCorrectionAllowed(const DriftCorrectionTraits& correction, ScheduleKind kind) {
  return (correction.schedules & ScheduleBit(kind)) != 0;
}

std::string ScheduleNames(ScheduleSet set, std::string_view separator) {
  std::string names;
  for (const ScheduleTraits& schedule : kSchedules) {
    if ((set & ScheduleBit(schedule.kind)) == 0) continue;
    if (!names.empty()) names.append(separator.data(), separator.size());
    names.append(schedule.name);
  }
  return names;
}

std::string DriftCorrectionNames() {
  std::string names;
  const absl::Span<const DriftCorrectionTraits> all = DriftCorrections();
  for (size_t i = 0; i < all.size(); ++i) {
    if (i > 0) names.append(i + 1 == all.size() ? " or " : ", ");
    names.append(all[i].name);
  }
  return names;
}

absl::StatusOr<ScheduleKind> ParseScheduleKind(std::string_view name) {
  for (const ScheduleTraits& schedule : kSchedules) {
    if (name == schedule.name) return schedule.kind;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown schedule \"", std::string(name), "\"; expected one of ",
                   ScheduleNames(kEverySchedule, ", ")));
}

std::string ScheduleKindName(ScheduleKind kind) {
  for (const ScheduleTraits& schedule : kSchedules) {
    if (schedule.kind == kind) return std::string(schedule.name);
  }
  return "unknown";
}

int64_t DriftBound(ScheduleKind kind, int num_stages, int stage, int accumulation) {
  return ScheduleTraitsOf(kind).drift_bound(num_stages, stage, accumulation);
}

int AccumulationForDriftLimit(int num_stages, int max_drift) {
  const int64_t overtakers = int64_t{num_stages} - 1;
  if (overtakers <= 0) return 1;
  if (max_drift < 1) return 0;
  return static_cast<int>((overtakers + max_drift - 1) / max_drift);
}

}  // namespace paci
