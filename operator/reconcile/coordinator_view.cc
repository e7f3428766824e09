#include "operator/reconcile/coordinator_view.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>

#include <google/protobuf/util/json_util.h>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/job_spec.h"
#include "common/operator_job_name.h"
#include "common/peer_identity.h"
#include "kube/object.h"
#include "operator/api/training_job.h"
#include "operator/reconcile/reconciliation.h"

namespace paci::op {

using nlohmann::json;
using kube::Field;
using kube::Generation;
using kube::IntField;
using kube::MetaString;
using kube::Rfc3339;

namespace {

absl::Time FromTimestamp(const google::protobuf::Timestamp& ts) {
  return absl::FromUnixSeconds(ts.seconds()) + absl::Nanoseconds(ts.nanos());
}

// Figures in .status are read by people (kubectl's printer columns print a
// number as it is): losses and fractions to 4 decimals, throughput in whole
// tokens per second. Still numbers, as the schema says. A figure that is not
// finite (a diverged loss) is left out: JSON has no NaN, and null is no number.
void SetRounded(json& object, const char* key, double value, double scale) {
  if (!std::isfinite(value)) {
    object.erase(key);
  } else if (scale == 1) {
    object[key] = static_cast<int64_t>(std::llround(value));
  } else {
    object[key] = std::round(value * scale) / scale;
  }
}

}  // namespace

void MirrorCoordinator(const v1::Job& job, json& status) {
  const v1::JobStatus& s = job.status();
  status["phase"] = PhaseFromCoordinator(s.phase());
  status["attempt"] = s.attempt();
  status["step"] = s.step();
  status["totalSteps"] = s.total_steps();
  SetRounded(status, "trainLoss", s.train_loss(), 1e4);
  SetRounded(status, "validationLoss", s.validation_loss(), 1e4);
  SetRounded(status, "tokensPerSecond", s.tokens_per_second(), 1);
  status["restarts"] = s.restarts();
  if (s.checkpoint_step() > 0) {
    status["checkpointStep"] = s.checkpoint_step();
  } else {
    status.erase("checkpointStep");
  }
  if (!s.message().empty()) {
    status["message"] = s.message();
  } else {
    status.erase("message");
  }
  int64_t max_drift = 0;
  json stages = json::array();
  for (const v1::StageStatus& stage : s.stages()) {
    const double active = stage.busy_seconds() + stage.idle_seconds();
    json entry = {{"stage", stage.stage()},
                  {"replica", stage.replica()},
                  {"maxDrift", stage.drift_max()},
                  {"driftBound", stage.drift_bound()}};
    // The pod it runs in: its worker registered as "<namespace>.<pod>".
    const std::string& worker = stage.worker_id();
    if (const size_t dot = worker.find('.'); dot != std::string::npos && dot + 1 < worker.size()) {
      entry["pod"] = worker.substr(dot + 1);
    }
    SetRounded(entry, "idleFraction", active > 0 ? stage.idle_seconds() / active : 0.0, 1e4);
    stages.push_back(std::move(entry));
    max_drift = std::max(max_drift, stage.drift_max());
  }
  status["stages"] = stages;
  status["maxDrift"] = max_drift;
  // The limit the drift keeps within, the accumulation that keeps it and the global
  // batch it makes (one derived from the other when the spec gave one).
  status["driftLimit"] = DriftLimit(job.spec().pipeline());
  status["accumulation"] = job.spec().pipeline().accumulation();
  status["globalBatch"] = GlobalBatch(job.spec().pipeline());
  // What closes the gap to the flush: the correction and the synchronous warm-up (given, or
  // the schedule's automatic default).
  status["driftCorrection"] = job.spec().pipeline().drift_correction();
  status["warmupSteps"] = job.spec().pipeline().warmup_steps();
  if (s.has_start_time()) status["startTime"] = Rfc3339(FromTimestamp(s.start_time()));
  if (s.has_completion_time()) {
    status["completionTime"] = Rfc3339(FromTimestamp(s.completion_time()));
  }
}

std::string WorkerSelectorValue(const json& job) {
  return MetaString(job, "namespace") + "." + MetaString(job, "name");
}

std::string CoordinatorJobName(const json& job, int parity_run) {
  // A job Kueue evicted runs again as another coordinator job. The form is
  // common/operator_job_name.h's, which the coordinator keeps for the operator.
  return OperatorJobName(MetaString(job, "name"), MetaString(job, "uid"), Generation(job),
                         IntField(Field(job, "status"), "evictions", 0), parity_run);
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
    const json& job, const std::string& coordinator_name,
    const std::function<void(v1::JobSpec*)>& edit) {
  const json& spec = Field(job, "spec");
  json message = json::object();
  for (const char* key :
       {"model", "pipeline", "optimizer", "training", "data", "checkpoint", "runtime"}) {
    if (spec.contains(key)) message[key] = spec[key];
  }
  v1::JobSpec result;
  google::protobuf::util::JsonParseOptions parse_options;
  parse_options.ignore_unknown_fields = false;
  const auto parsed =
      google::protobuf::util::JsonStringToMessage(message.dump(), &result, parse_options);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("spec: ", parsed.message().as_string()));
  }
  if (edit) edit(&result);
  result.set_name(coordinator_name);
  const json& policy = Field(spec, "runPolicy");
  v1::RunPolicy& run_policy = *result.mutable_run_policy();
  if (const json& limit = Field(policy, "backoffLimit"); limit.is_number_integer()) {
    run_policy.set_backoff_limit(limit.get<int32_t>());  // optional: absent takes the default
  }
  run_policy.set_active_deadline_seconds(IntField(policy, "activeDeadlineSeconds", 0));
  run_policy.set_priority(static_cast<int32_t>(IntField(policy, "priority", 0)));
  (*run_policy.mutable_worker_selector())[kWorkerJobLabel] = WorkerSelectorValue(job);
  ApplyJobSpecDefaults(&result);
  if (absl::Status valid = ValidateJobSpec(result); !valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("spec.", valid.message()));
  }
  return result;
}

}  // namespace paci::op
