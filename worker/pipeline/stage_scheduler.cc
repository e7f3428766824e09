#include "worker/pipeline/stage_scheduler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace paci {

// What differs between schedules is their row of the schedule table
// (common/schedule_kind.h); the rules below are the same for all.
StageScheduler::StageScheduler(const StageSchedulerOptions& options)
    : options_(options),
      traits_(ScheduleTraitsOf(options.schedule)),
      accumulation_(traits_.effective_accumulation(options.accumulation)),
      in_flight_limit_(traits_.in_flight_limit(options.num_stages, options.stage, accumulation_)),
      drift_bound_(traits_.drift_bound(options.num_stages, options.stage, options.accumulation)),
      version_(options.start_step),
      forwards_(options.start_step * accumulation_),
      backwards_(options.start_step * accumulation_),
      next_micro_batch_(options.start_step * accumulation_),
      pause_at_(NextPausePoint(options.start_step)) {}

uint64_t StageScheduler::NextPausePoint(int64_t after_step) const {
  int64_t step = options_.total_steps;
  if (traits_.flushes || after_step < options_.warmup_steps) {
    step = std::min(step, after_step + 1);
  }
  for (int64_t interval : {options_.eval_interval, options_.checkpoint_interval}) {
    if (interval > 0) step = std::min(step, (after_step / interval + 1) * interval);
  }
  step = std::max(step, after_step);
  return static_cast<uint64_t>(step) * accumulation_;
}

bool StageScheduler::ForwardAllowed(bool has_activation) const {
  if (in_flight() >= in_flight_limit_) return false;
  if (is_first()) return next_micro_batch_ < pause_at_;
  return has_activation;
}

StageAction StageScheduler::Next(bool has_gradient, bool has_activation) const {
  if (is_last()) {
    // The last stage's loss is its own gradient: 1F1B runs forward and
    // backward back to back; GPipe waits for the whole group first.
    const bool group_complete =
        !traits_.last_stage_waits_for_group || forwards_ % accumulation_ == 0;
    has_gradient = in_flight() > 0 && group_complete;
  }
  if (has_gradient && in_flight() > 0) return StageAction::kBackward;
  if (ForwardAllowed(has_activation)) return StageAction::kForward;
  if (is_first() && next_micro_batch_ == pause_at_ && in_flight() == 0) {
    if (drain_handled_ && drained_step() >= options_.total_steps) return StageAction::kDone;
    return StageAction::kDrained;
  }
  return StageAction::kWait;
}

absl::Status StageScheduler::OnForward(uint64_t micro_batch_id) {
  if (in_flight() >= in_flight_limit_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "stage ", options_.stage, ": forward of micro-batch ", micro_batch_id,
        " would exceed the in-flight limit of ", in_flight_limit_));
  }
  if (is_first()) {
    if (micro_batch_id != next_micro_batch_ || next_micro_batch_ >= pause_at_) {
      return absl::FailedPreconditionError(absl::StrCat(
          "stage 0: forward of micro-batch ", micro_batch_id, " is not allowed now (next is ",
          next_micro_batch_, ", pause at ", pause_at_, ")"));
    }
    ++next_micro_batch_;
  } else if (!in_flight_.empty() && micro_batch_id <= in_flight_.back().micro_batch_id) {
    return absl::FailedPreconditionError(absl::StrCat(
        "stage ", options_.stage, ": micro-batch ", micro_batch_id,
        " arrived after micro-batch ", in_flight_.back().micro_batch_id));
  }
  in_flight_.push_back({micro_batch_id, version_});
  ++forwards_;
  return absl::OkStatus();
}

absl::StatusOr<BackwardResult> StageScheduler::OnBackward(uint64_t micro_batch_id) {
  if (in_flight_.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "stage ", options_.stage, ": gradient for micro-batch ", micro_batch_id,
        " but no micro-batch is in flight"));
  }
  const InFlight oldest = in_flight_.front();
  if (oldest.micro_batch_id != micro_batch_id) {
    return absl::FailedPreconditionError(absl::StrCat(
        "stage ", options_.stage, ": gradient for micro-batch ", micro_batch_id,
        " but the oldest in flight is ", oldest.micro_batch_id));
  }
  BackwardResult result;
  result.drift = version_ - oldest.version_at_forward;
  if (result.drift > drift_bound_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "stage ", options_.stage, ": micro-batch ", micro_batch_id, " crossed ", result.drift,
        " optimizer steps between forward and backward; the bound ceil((P-1-s)/a) is ",
        drift_bound_));
  }
  in_flight_.pop_front();
  ++backwards_;
  result.step_now = backwards_ % accumulation_ == 0;
  if (result.step_now) ++version_;
  return result;
}

int64_t StageScheduler::StepsBeforeBackward(uint64_t micro_batch_id) const {
  const int64_t at_backward = static_cast<int64_t>(micro_batch_id / accumulation_);
  return std::max<int64_t>(0, at_backward - version_);
}

DrainWork StageScheduler::drain_work() const {
  const int64_t step = drained_step();
  DrainWork work;
  if (step == options_.start_step) {
    work.evaluate = options_.evaluates && step == options_.total_steps;
    return work;
  }
  auto due = [&](int64_t interval) {
    return step == options_.total_steps || (interval > 0 && step % interval == 0);
  };
  work.evaluate = options_.evaluates && due(options_.eval_interval);
  work.checkpoint = options_.checkpoints && due(options_.checkpoint_interval);
  return work;
}

void StageScheduler::OnDrainHandled() {
  if (drained_step() >= options_.total_steps) {
    drain_handled_ = true;
    return;
  }
  pause_at_ = NextPausePoint(drained_step());
}

}  // namespace paci
