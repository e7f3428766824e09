// Elastic jobs (pipeline.elastic, common/elastic_shape.h): JobManager's
// CheckElasticLocked, ResizeLocked and IdleMatchingWorkersLocked. A job
// changes shape only by restarting from its last checkpoint, which the
// workers re-cut to the new shape (worker/runtime/checkpoint.h, LoadRecut).

#include <algorithm>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "server/job_manager.h"
#include "server/job_placement.h"

namespace paci {

int JobManager::IdleMatchingWorkersLocked(const JobState& state) const {
  const PendingJob pending = AsPending(state.job, state.sequence);
  int idle = 0;
  for (const WorkerSlot& worker : workers_.Slots()) {
    if (worker.idle && UnmatchedLabel(worker.labels, pending.selector) == nullptr) ++idle;
  }
  return idle;
}

void JobManager::CheckElasticLocked(JobState& state, absl::Time now) {
  if (!IsElastic(state.spec()) || state.awaiting_reconnect) return;
  const v1::ElasticSpec& elastic = state.spec().pipeline().elastic();
  const ElasticShape current = ShapeOf(state.spec());
  const v1::JobStatus& status = state.status();
  const bool waiting = status.phase() == v1::QUEUED || status.phase() == v1::RESTARTING;
  if (waiting && queue_.Contains(state.name())) {
    // Waiting for workers: past the grace, run at what there is. A shape
    // decided before and not placed (its workers went to another job, or
    // away) is decided again a grace after that decision.
    const absl::Time since = state.resize_started != absl::InfinitePast() ? state.resize_started
                                                                         : state.queued_since;
    if (now - since < absl::Seconds(elastic.grace_seconds())) return;
    const std::optional<ElasticShape> fits =
        LargestShapeWithin(state.spec(), IdleMatchingWorkersLocked(state));
    if (!fits || *fits == current) return;
    const bool lost = status.phase() == v1::RESTARTING;
    ResizeLocked(state, *fits, lost ? "WorkersLost" : "WorkersUnavailable",
                 absl::StrCat(lost ? "the lost workers were not replaced within "
                                   : "its workers were not all there within ",
                              elastic.grace_seconds(), " s (pipeline.elastic.grace_seconds); ",
                              fits->workers(), " workers are"));
    return;
  }
  if (status.phase() != v1::RUNNING) return;
  // Running: grow when a new checkpoint is whole (so nothing after it is
  // lost) and idle workers allow a larger shape, not sooner than the
  // interval after the last resize.
  const bool new_checkpoint = status.checkpoint_step() > state.seen_checkpoint;
  state.seen_checkpoint = status.checkpoint_step();
  if (!new_checkpoint ||
      now - state.last_resize < absl::Seconds(elastic.min_resize_interval_seconds())) {
    return;
  }
  // Not at the end: a stage that finished let its worker go (it is idle, not
  // free), and the last checkpoint leaves nothing to train at a larger shape.
  if (status.checkpoint_step() >= state.spec().training().steps() ||
      std::any_of(status.stages().begin(), status.stages().end(),
                  [](const v1::StageStatus& stage) { return stage.finished(); })) {
    return;
  }
  const std::optional<ElasticShape> fits = LargestShapeWithin(
      state.spec(), current.workers() + IdleMatchingWorkersLocked(state));
  if (!fits || fits->workers() <= current.workers()) return;
  const std::string why = absl::StrCat("idle workers allow ", fits->workers(),
                                       "; it grows at its checkpoint of step ",
                                       status.checkpoint_step());
  StopWorkersLocked(state, "resizing: " + why);
  state.queued_since = now;
  SetPhaseLocked(state, v1::RESTARTING, "Resizing",
                 absl::StrCat("resizing to ", ShapeName(*fits), ": ", why));
  ResizeLocked(state, *fits, "WorkersAvailable", why);
}

void JobManager::ResizeLocked(JobState& state, const ElasticShape& to, const std::string& reason,
                              const std::string& why) {
  const ElasticShape from = ShapeOf(state.spec());
  if (!state.job.has_submitted_spec()) *state.job.mutable_submitted_spec() = state.spec();
  *state.job.mutable_spec() = ResizedJobSpec(state.job.submitted_spec(), to);
  state.shards.clear();  // a checkpoint is whole by the new shape's stage count
  v1::JobStatus& status = state.status();
  status.set_resizes(status.resizes() + 1);
  state.resize_started = clock_.Now();
  metrics_.AddResize(state.name());
  const std::string message =
      absl::StrCat("from ", ShapeName(from), " to ", ShapeName(to), " at step ",
                   status.checkpoint_step(), " (its last checkpoint): ", why);
  SetConditionLocked(state, "Resizing", true, reason, message);
  LOG(INFO) << "job " << state.name() << " resizes " << message;
  queue_.Remove(state.name());  // queued again needing the new shape's workers
  ChangedLocked(state, true);
  EnqueueLocked(state);
}

}  // namespace paci
