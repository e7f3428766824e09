#pragma once

#include <cstdint>
#include <deque>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/schedule_kind.h"

namespace paci {

struct StageSchedulerOptions {
  ScheduleKind schedule = ScheduleKind::kPaci;
  int num_stages = 1;    // P
  int stage = 0;         // s in [0, P)
  int accumulation = 1;  // a; async-1f1b always uses 1
  int64_t total_steps = 1;   // optimizer steps to reach
  int64_t start_step = 0;    // steps already taken (resume from a checkpoint)
  // Stage 0 drains the pipeline at every multiple of these (0: never), and
  // always at total_steps. The flushing schedules drain at every step anyway.
  int64_t eval_interval = 0;
  int64_t checkpoint_interval = 0;
  // pipeline.warmup_steps: stage 0 also drains at every step below this, so
  // the first steps cross none (drift 0, as a flushing schedule's).
  int64_t warmup_steps = 0;
  // What is due at those points (drain_work()): an evaluation, a checkpoint.
  bool evaluates = false;
  bool checkpoints = false;
};

// What stage 0 does at a drained point before it injects again.
struct DrainWork {
  bool evaluate = false;    // a multiple of eval_interval, or the last step
  bool checkpoint = false;  // a multiple of checkpoint_interval, or the last step
};

// What a stage should do next.
enum class StageAction {
  kBackward,  // pop the oldest in-flight micro-batch and run its backward
  kForward,   // run one forward (stage 0: of next_micro_batch())
  kDrained,   // stage 0 only: the pipe is empty at drained_step(); evaluate or
              // checkpoint if due, then call OnDrainHandled()
  kWait,      // nothing can run until a tensor arrives
  kDone,      // stage 0 only: every step is taken and the pipe is empty
};

struct BackwardResult {
  int64_t drift = 0;         // optimizer steps taken since this micro-batch's forward
  bool step_now = false;     // this was the a-th backward: step the optimizer now
};

// The schedule and staleness logic of one pipeline stage (docs/design.md sections 1 and 2),
// with no tensors and no network, so that the workers, the tests and a
// simulator all run the same rules.
//
// Rules: backward has priority; forwards are capped by the in-flight limit;
// backwards run in forward order (FIFO); every a-th backward is followed by an
// optimizer step; stage 0 stops injecting at drain points (every step for a
// flushing schedule) until all its micro-batches are back. What differs
// between schedules is read from their row of the schedule table
// (ScheduleTraits in common/schedule_kind.h): whether it flushes, the
// effective a (1 for async-1f1b), the in-flight limit (P - s for the 1F1B
// schedules, a for GPipe), whether the last stage waits for a whole group
// (GPipe) and the drift bound. The drift of each backward is checked against
// that bound and exceeding it is an error, never silent.
//
// Not thread-safe: owned by the stage's compute thread.
class StageScheduler {
 public:
  explicit StageScheduler(const StageSchedulerOptions& options);

  // What to do next. `has_gradient`: a gradient from stage s+1 is waiting
  // (ignored on the last stage, whose loss is its own gradient).
  // `has_activation`: an activation from stage s-1 is waiting (ignored on
  // stage 0, which makes its own micro-batches).
  StageAction Next(bool has_gradient, bool has_activation) const;

  // Records a forward of `micro_batch_id` at the current weight version.
  // FailedPrecondition if the schedule does not allow a forward now or, on
  // stage 0, the id is not next_micro_batch().
  absl::Status OnForward(uint64_t micro_batch_id);

  // Records the backward of `micro_batch_id`, which must be the oldest in
  // flight. Returns its drift and whether the optimizer steps now (the weight
  // version then advances by one). FailedPrecondition when the id is out of
  // order or the drift exceeds the bound.
  absl::StatusOr<BackwardResult> OnBackward(uint64_t micro_batch_id);

  // Stage 0: the work due at drained_step() is done; go on injecting.
  void OnDrainHandled();

  // The optimizer steps this stage will take between now and the backward of
  // `micro_batch_id` (before its own step): the drift that micro-batch's
  // backward will report if it is forwarded now. Exact, not a bound:
  // backwards run in id order and every a-th one steps, so the version at the
  // backward of micro-batch m is floor(m / a). pipeline.drift_correction
  // "predict" forwards it on weights extrapolated that many steps ahead.
  int64_t StepsBeforeBackward(uint64_t micro_batch_id) const;

  bool is_first() const { return options_.stage == 0; }
  bool is_last() const { return options_.stage == options_.num_stages - 1; }
  int accumulation() const { return accumulation_; }
  int64_t version() const { return version_; }  // optimizer steps taken
  int in_flight() const { return static_cast<int>(in_flight_.size()); }
  // The micro-batch whose backward comes next; in_flight() must be > 0.
  uint64_t oldest_in_flight() const { return in_flight_.front().micro_batch_id; }
  int in_flight_limit() const { return in_flight_limit_; }
  int64_t drift_bound() const { return drift_bound_; }
  uint64_t next_micro_batch() const { return next_micro_batch_; }
  // Stage 0: the step at which the pipe is (or will be) drained next.
  int64_t drained_step() const { return pause_at_ / accumulation_; }
  // Stage 0: what is due at drained_step(). The only drain at start_step is
  // that of a job resumed at its last step, with nothing to train: it
  // evaluates the weights it resumed (its summary says their loss) and saves
  // nothing (they are saved).
  DrainWork drain_work() const;
  int64_t total_steps() const { return options_.total_steps; }
  int64_t forwards() const { return forwards_; }
  int64_t backwards() const { return backwards_; }

 private:
  struct InFlight {
    uint64_t micro_batch_id;
    int64_t version_at_forward;
  };
  bool ForwardAllowed(bool has_activation) const;
  uint64_t NextPausePoint(int64_t after_step) const;

  const StageSchedulerOptions options_;
  const ScheduleTraits& traits_;  // options_.schedule's row of the table
  const int accumulation_;
  const int in_flight_limit_;
  const int64_t drift_bound_;
  int64_t version_;
  int64_t forwards_;    // forwards since the start of training (including resumed ones)
  int64_t backwards_;
  uint64_t next_micro_batch_;  // stage 0
  uint64_t pause_at_;          // stage 0: no injection at or past this id until drained
  bool drain_handled_ = false;
  std::deque<InFlight> in_flight_;
};

}  // namespace paci
