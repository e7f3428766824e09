#include "operator/reconcile/coordinator_view.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/elastic_shape.h"
#include "common/job_spec.h"
#include "common/operator_job_name.h"
#include "common/peer_identity.h"
#include "kube/object.h"
#include "operator/api/training_job.h"
#include "operator/reconcile/reconciliation.h"

namespace paci::op {

using kube::Rfc3339;

namespace {

absl::Time FromTimestamp(const google::protobuf::Timestamp& ts) {
  return absl::FromUnixSeconds(ts.seconds()) + absl::Nanoseconds(ts.nanos());
}

// Figures in .status are read by people (kubectl's printer columns print a
// number as it is): losses and fractions to 4 decimals, throughput in whole
// tokens per second. Still numbers, as the schema says. A figure that is not
// finite (a diverged loss) is left out: JSON has no NaN, and null is no number.
std::optional<double> Rounded(double value, double scale) {
  if (!std::isfinite(value)) return std::nullopt;
  return scale == 1 ? static_cast<double>(std::llround(value)) : std::round(value * scale) / scale;
}

}  // namespace

void MirrorCoordinator(const v1::Job& job, TrainingJobStatus& status) {
  const v1::JobStatus& s = job.status();
  status.phase = PhaseFromCoordinator(s.phase());
  status.attempt = s.attempt();
  status.step = s.step();
  status.total_steps = s.total_steps();
  status.train_loss = Rounded(s.train_loss(), 1e4);
  status.validation_loss = Rounded(s.validation_loss(), 1e4);
  if (const std::optional<double> tokens = Rounded(s.tokens_per_second(), 1)) {
    status.tokens_per_second = static_cast<int64_t>(*tokens);
  } else {
    status.tokens_per_second.reset();
  }
  status.restarts = s.restarts();
  status.checkpoint_step =
      s.checkpoint_step() > 0 ? std::optional<int64_t>(s.checkpoint_step()) : std::nullopt;
  status.message = s.message();
  int64_t max_drift = 0;
  status.stages.emplace();
  for (const v1::StageStatus& stage : s.stages()) {
    const double active = stage.busy_seconds() + stage.idle_seconds();
    StageStatus entry;
    entry.stage = stage.stage();
    entry.replica = stage.replica();
    entry.max_drift = stage.drift_max();
    entry.drift_bound = stage.drift_bound();
    // The pod it runs in: its worker registered as "<namespace>.<pod>".
    const std::string& worker = stage.worker_id();
    if (const size_t dot = worker.find('.'); dot != std::string::npos && dot + 1 < worker.size()) {
      entry.pod = worker.substr(dot + 1);
    }
    entry.idle_fraction = Rounded(active > 0 ? stage.idle_seconds() / active : 0.0, 1e4);
    status.stages->push_back(std::move(entry));
    max_drift = std::max(max_drift, stage.drift_max());
  }
  status.max_drift = max_drift;
  // The limit the drift keeps within, the accumulation that keeps it and the global
  // batch it makes (one derived from the other when the spec gave one).
  status.drift_limit = DriftLimit(job.spec().pipeline());
  status.accumulation = job.spec().pipeline().accumulation();
  status.global_batch = GlobalBatch(job.spec().pipeline());
  // What closes the gap to the flush: the correction and the synchronous warm-up (given, or
  // the schedule's automatic default).
  status.drift_correction = job.spec().pipeline().drift_correction();
  status.warmup_steps = job.spec().pipeline().warmup_steps();
  // pipeline.elastic: the shape it runs at now, and how often it changed.
  status.shape = IsElastic(job.spec()) ? ShapeName(ShapeOf(job.spec())) : "";
  status.resizes = s.resizes() > 0 ? std::optional<int64_t>(s.resizes()) : std::nullopt;
  if (s.has_start_time()) status.start_time = Rfc3339(FromTimestamp(s.start_time()));
  if (s.has_completion_time()) {
    status.completion_time = Rfc3339(FromTimestamp(s.completion_time()));
  }
}

std::string WorkerSelectorValue(const ObjectMeta& metadata) {
  return metadata.namespace_name + "." + metadata.name;
}

std::string CoordinatorJobName(const TrainingJob& job, int parity_run) {
  // A job Kueue evicted runs again as another coordinator job. The form is
  // common/operator_job_name.h's, which the coordinator keeps for the operator.
  return OperatorJobName(job.metadata.name, job.metadata.uid, job.metadata.generation,
                         job.status.evictions.value_or(0), parity_run);
}

std::string PhaseFromCoordinator(v1::JobPhase phase) {
  switch (phase) {
    case v1::RUNNING:
      return kPhaseRunning;
    case v1::RESTARTING:
      return kPhaseRestarting;
    case v1::SUCCEEDED:
      return kPhaseSucceeded;
    case v1::FAILED:
      return kPhaseFailed;
    case v1::CANCELLED:
      return kPhaseCancelled;
    default:
      return kPhasePending;
  }
}

absl::StatusOr<v1::JobSpec> JobSpecFromTrainingJob(
    const TrainingJob& job, const std::string& coordinator_name,
    const std::function<void(v1::JobSpec*)>& edit) {
  if (!job.spec.job.ok()) return job.spec.job.status();
  v1::JobSpec result = *job.spec.job;
  if (edit) edit(&result);
  result.set_name(coordinator_name);
  const RunPolicySpec& policy = job.spec.run_policy;
  v1::RunPolicy& run_policy = *result.mutable_run_policy();
  // optional: absent takes the default
  if (policy.backoff_limit) run_policy.set_backoff_limit(*policy.backoff_limit);
  run_policy.set_active_deadline_seconds(policy.active_deadline_seconds);
  run_policy.set_priority(policy.priority);
  (*run_policy.mutable_worker_selector())[kWorkerJobLabel] = WorkerSelectorValue(job.metadata);
  ApplyJobSpecDefaults(&result);
  if (absl::Status valid = ValidateJobSpec(result); !valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("spec.", valid.message()));
  }
  return result;
}

}  // namespace paci::op
