#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/schedule_kind.h"

namespace paci {

// What one stage's compute thread spends, in seconds.
struct StageCosts {
  double forward = 0;         // one training forward, sending its output included
  double backward = 0;        // one backward, sending the input gradient included
  double optimizer_step = 0;  // one optimizer step (after every a-th backward)
  double eval_forward = 0;    // one validation forward at a drained point
};

struct PipelineSimulatorOptions {
  ScheduleKind schedule = ScheduleKind::kPaci;
  int num_stages = 1;    // P, 1..kMaxStages
  int accumulation = 1;  // a (m for the flushing schedules); async-1f1b uses 1
  int64_t steps = 1;     // optimizer steps
  int64_t warmup_steps = 0;  // pipeline.warmup_steps: the first steps drain (drift 0)
  // Validation passes at drained points, as in a run: every eval_interval
  // steps (0: only at the end) and at the end, each of eval_micro_batches
  // forwards through every stage (0: no validation).
  int64_t eval_interval = 0;
  int eval_micro_batches = 0;
  // One entry per stage, or one entry for all stages.
  std::vector<StageCosts> costs;
  // Seconds from the end of a stage's send to the tensor being there for its
  // neighbour.
  double link_latency = 0;

  static constexpr int kMaxStages = 1024;
  // steps * a * P must stay below this (the number of simulated tasks).
  static constexpr int64_t kMaxTasks = 2'000'000'000;
};

struct StageSimulation {
  double busy_seconds = 0;    // forwards, backwards, optimizer steps, eval forwards
  double idle_seconds = 0;    // the rest of the run: seconds - busy_seconds
  double utilization = 0;     // busy_seconds / seconds
  double idle_fraction = 0;   // idle_seconds / seconds
  int64_t forwards = 0;
  int64_t backwards = 0;
  int64_t optimizer_steps = 0;
  int64_t drift_bound = 0;
  int64_t drift_max = 0;
  double drift_mean = 0;
  std::vector<int64_t> drift_histogram;  // [d]: backwards that crossed d optimizer steps
  int max_in_flight = 0;       // most micro-batches between forward and backward (activations held)
  double mean_in_flight = 0;   // time average over the run
};

struct PipelineSimulation {
  double seconds = 0;                   // from the first forward to the last task's end
  double micro_batches_per_second = 0;  // training micro-batches (steps * a) / seconds
  std::vector<StageSimulation> stages;  // index = stage
};

// A discrete-event simulation of a pipeline run for pipelines deeper than a
// machine can run: P StageSchedulers, the very schedule logic every worker
// runs, driven against each other in simulated time. Each stage is one
// compute thread that takes the next action its scheduler allows given the
// tensors that have arrived (control frames first, as the runtime does), and
// is busy for that action's cost; a sent tensor arrives link_latency after
// the end of the work that produced it. Queues are unbounded (the in-flight
// caps bound them anyway). Deterministic; no threads, no clocks.
//
// InvalidArgument naming the field for options out of range; Internal when
// a scheduler refuses an action (which would be a bug in the schedule) or
// the pipeline deadlocks.
absl::StatusOr<PipelineSimulation> SimulatePipeline(const PipelineSimulatorOptions& options);

}  // namespace paci
