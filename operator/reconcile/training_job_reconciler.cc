#include "operator/reconcile/training_job_reconciler.h"

#include <algorithm>
#include <cmath>
#include <map>

#include <google/protobuf/util/json_util.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/job_phase.h"
#include "common/job_spec.h"
#include "operator/reconcile/job_objects.h"
#include "operator/reconcile/json_fields.h"

namespace paci::op {
namespace {

using nlohmann::json;

constexpr char kPhasePending[] = "Pending";
constexpr char kPhaseSuspended[] = "Suspended";
constexpr char kPhaseRunning[] = "Running";
constexpr char kPhaseRestarting[] = "Restarting";
constexpr char kPhaseSucceeded[] = "Succeeded";
constexpr char kPhaseFailed[] = "Failed";
constexpr char kPhaseCancelled[] = "Cancelled";

std::string Rfc3339(absl::Time t) {
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", t, absl::UTCTimeZone());
}

absl::Time FromTimestamp(const google::protobuf::Timestamp& ts) {
  return absl::FromUnixSeconds(ts.seconds()) + absl::Nanoseconds(ts.nanos());
}

bool IsFinished(const std::string& phase) {
  return phase == kPhaseSucceeded || phase == kPhaseFailed || phase == kPhaseCancelled;
}

bool HasFinalizer(const json& meta) {
  const json& finalizers = Field(meta, "finalizers");
  if (!finalizers.is_array()) return false;
  return std::find(finalizers.begin(), finalizers.end(), json(kFinalizer)) != finalizers.end();
}

bool BeingDeleted(const json& object) {
  return Field(Field(object, "metadata"), "deletionTimestamp").is_string();
}

// Sets condition `type` in status.conditions, keeping its transition time
// when its truth does not change.
void SetCondition(json& status, const std::string& type, bool value, const std::string& reason,
                  const std::string& message, int64_t generation, absl::Time now) {
  json& conditions = status["conditions"];
  if (!conditions.is_array()) conditions = json::array();
  const std::string truth = value ? "True" : "False";
  for (json& condition : conditions) {
    if (StringField(condition, "type") != type) continue;
    if (StringField(condition, "status") != truth) {
      condition["lastTransitionTime"] = Rfc3339(now);
    }
    condition["status"] = truth;
    condition["reason"] = reason;
    condition["message"] = message;
    condition["observedGeneration"] = generation;
    return;
  }
  conditions.push_back(json{{"type", type},
                        {"status", truth},
                        {"reason", reason},
                        {"message", message},
                        {"observedGeneration", generation},
                        {"lastTransitionTime", Rfc3339(now)}});
}

// Clears a condition that was set before; absent ones stay absent.
void ClearCondition(json& status, const std::string& type, const std::string& reason,
                    int64_t generation, absl::Time now) {
  const json& conditions = Field(status, "conditions");
  if (!conditions.is_array()) return;
  for (const json& condition : conditions) {
    if (StringField(condition, "type") == type && StringField(condition, "status") == "True") {
      SetCondition(status, type, false, reason, "", generation, now);
      return;
    }
  }
}

// Deletes every pod of the job not already on its way out.
void DeleteAllPods(const ObservedWorld& world, ReconcileActions& actions) {
  for (const json& pod : world.pods) {
    if (!BeingDeleted(pod)) {
      actions.delete_pods.push_back(StringField(Field(pod, "metadata"), "name"));
    }
  }
}

// Deletes the object once ttlSecondsAfterFinished has passed since it finished.
void ApplyTtl(const json& spec, const json& status, absl::Time now, ReconcileActions& actions) {
  const json& ttl = Field(Field(spec, "runPolicy"), "ttlSecondsAfterFinished");
  if (!ttl.is_number_integer()) return;
  absl::Time completed;
  std::string error;
  if (!absl::ParseTime(absl::RFC3339_full, StringField(status, "completionTime"), &completed,
                       &error)) {
    completed = now;
  }
  const absl::Duration left = completed + absl::Seconds(ttl.get<int64_t>()) - now;
  if (left <= absl::ZeroDuration()) {
    actions.delete_job = true;
  } else {
    actions.requeue_after = left;
  }
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

// Copies the coordinator's view of the job into .status.
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
                  {"maxDrift", stage.drift_max()},
                  {"driftBound", stage.drift_bound()}};
    SetRounded(entry, "idleFraction", active > 0 ? stage.idle_seconds() / active : 0.0, 1e4);
    stages.push_back(std::move(entry));
    max_drift = std::max(max_drift, stage.drift_max());
  }
  status["stages"] = stages;
  status["maxDrift"] = max_drift;
  if (s.has_start_time()) status["startTime"] = Rfc3339(FromTimestamp(s.start_time()));
  if (s.has_completion_time()) {
    status["completionTime"] = Rfc3339(FromTimestamp(s.completion_time()));
  }
}

void Finish(const json& current, json desired, ReconcileActions& actions) {
  if (desired != current) actions.status = std::move(desired);
}

}  // namespace

std::string WorkerSelectorValue(const json& job) {
  const json& meta = Field(job, "metadata");
  return StringField(meta, "namespace") + "." + StringField(meta, "name");
}

std::string CoordinatorJobName(const json& job) {
  const json& meta = Field(job, "metadata");
  const std::string uid = StringField(meta, "uid").substr(0, 8);
  const json& generation = Field(meta, "generation");
  const std::string suffix = absl::StrCat(
      "-", uid, "-g", generation.is_number_integer() ? generation.get<int64_t>() : 1);
  std::string name = StringField(meta, "name");
  constexpr size_t kMaxName = 63;
  if (name.size() + suffix.size() > kMaxName) name.resize(kMaxName - suffix.size());
  while (!name.empty() && name.back() == '-') name.pop_back();
  return name + suffix;
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

absl::StatusOr<v1::JobSpec> JobSpecFromTrainingJob(const json& job,
                                                   const std::string& coordinator_name) {
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
  result.set_name(coordinator_name);
  const json& policy = Field(spec, "runPolicy");
  v1::RunPolicy& run_policy = *result.mutable_run_policy();
  if (policy.contains("backoffLimit") && policy["backoffLimit"].is_number_integer()) {
    run_policy.set_backoff_limit(policy["backoffLimit"].get<int32_t>());
  }
  if (policy.contains("activeDeadlineSeconds") &&
      policy["activeDeadlineSeconds"].is_number_integer()) {
    run_policy.set_active_deadline_seconds(policy["activeDeadlineSeconds"].get<int64_t>());
  }
  if (policy.contains("priority") && policy["priority"].is_number_integer()) {
    run_policy.set_priority(policy["priority"].get<int32_t>());
  }
  (*run_policy.mutable_worker_selector())[kWorkerSelectorKey] = WorkerSelectorValue(job);
  ApplyJobSpecDefaults(&result);
  if (absl::Status valid = ValidateJobSpec(result); !valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("spec.", valid.message()));
  }
  return result;
}

ReconcileActions ReconcileTrainingJob(const ObservedWorld& world,
                                      const ReconcilerOptions& options) {
  ReconcileActions actions;
  const json& job = world.job;
  const json& meta = Field(job, "metadata");
  const json& spec = Field(job, "spec");
  const json& status = Field(job, "status");
  const json& generation_field = Field(meta, "generation");
  const int64_t generation =
      generation_field.is_number_integer() ? generation_field.get<int64_t>() : 1;
  const std::string coordinator_name = StringField(status, "coordinatorJob");
  const v1::Job* coordinator = world.coordinator_job ? &*world.coordinator_job : nullptr;
  const bool coordinator_active = coordinator && !IsTerminal(coordinator->status().phase());
  const std::string phase_before = StringField(status, "phase");

  // Deleted: cancel at the coordinator, stop the workers, let the object go.
  if (BeingDeleted(job)) {
    if (coordinator_active) {
      actions.cancel = coordinator_name;
      actions.events.push_back(
          {"Normal", "Cancelling", "cancelling " + coordinator_name + " at the coordinator"});
    }
    DeleteAllPods(world, actions);
    actions.remove_finalizer = HasFinalizer(meta);
    return actions;
  }
  actions.add_finalizer = !HasFinalizer(meta);

  json desired = status.is_object() ? status : json::object();
  desired["observedGeneration"] = generation;

  if (IsFinished(phase_before)) {
    DeleteAllPods(world, actions);
    ApplyTtl(spec, status, world.now, actions);
    Finish(status, std::move(desired), actions);
    return actions;
  }

  const std::string submit_name =
      coordinator_name.empty() ? CoordinatorJobName(job) : coordinator_name;
  absl::StatusOr<v1::JobSpec> job_spec = JobSpecFromTrainingJob(job, submit_name);
  if (job_spec.ok()) {
    if (absl::Status worker = ValidateWorkerTemplate(Field(spec, "worker")); !worker.ok()) {
      job_spec = worker;
    }
  }
  if (!job_spec.ok()) {
    const std::string message(job_spec.status().message());
    desired["phase"] = kPhaseFailed;
    desired["message"] = message;
    desired["completionTime"] = Rfc3339(world.now);
    SetCondition(desired, "Failed", true, "InvalidSpec", message, generation, world.now);
    actions.events.push_back({"Warning", "InvalidSpec", message});
    DeleteAllPods(world, actions);
    Finish(status, std::move(desired), actions);
    return actions;
  }

  // Suspended: nothing runs; resuming submits again (from its checkpoints).
  if (Field(Field(spec, "runPolicy"), "suspend") == json(true)) {
    if (coordinator_active) actions.cancel = coordinator_name;
    DeleteAllPods(world, actions);
    desired["phase"] = kPhaseSuspended;
    desired.erase("coordinatorJob");
    SetCondition(desired, "Suspended", true, "Suspended", "spec.runPolicy.suspend is true",
                 generation, world.now);
    if (phase_before != kPhaseSuspended) {
      actions.events.push_back({"Normal", "Suspended", "stopped its workers"});
    }
    Finish(status, std::move(desired), actions);
    return actions;
  }
  ClearCondition(desired, "Suspended", "Resumed", generation, world.now);

  // The worker pods and their Service.
  if (!world.service_exists) actions.create_service = WorkerService(job, options);
  const int stages = job_spec->pipeline().num_stages();
  std::map<int, const json*> by_index;
  for (const json& pod : world.pods) {
    const json& pod_meta = Field(pod, "metadata");
    int index = -1;
    try {
      index = std::stoi(StringField(Field(pod_meta, "labels"), kWorkerIndexLabel));
    } catch (const std::exception&) {
    }
    const std::string pod_name = StringField(pod_meta, "name");
    const std::string pod_phase = StringField(Field(pod, "status"), "phase");
    if (index < 0 || index >= stages) {
      if (!BeingDeleted(pod)) actions.delete_pods.push_back(pod_name);
      continue;
    }
    by_index[index] = &pod;
    if (!BeingDeleted(pod) && (pod_phase == "Failed" || pod_phase == "Succeeded")) {
      actions.delete_pods.push_back(pod_name);
      actions.events.push_back({"Warning", "WorkerExited",
                                absl::StrCat("worker pod ", pod_name, " ended (", pod_phase,
                                             "); replacing it")});
    }
  }
  for (int index = 0; index < stages; ++index) {
    if (by_index.count(index) == 0) actions.create_pods.push_back(WorkerPod(job, index, options));
  }

  // The job at the coordinator.
  actions.requeue_after = options.poll_interval;
  if (coordinator == nullptr) {
    // Not submitted yet, or the coordinator lost it: submitting is idempotent.
    actions.submit = *job_spec;
    if (phase_before == kPhaseSuspended && !job_spec->checkpoint().directory().empty()) {
      actions.submit->mutable_checkpoint()->set_resume(true);  // go on from before the suspension
    }
    desired["coordinatorJob"] = submit_name;
    if (phase_before.empty() || phase_before == kPhaseSuspended) {
      desired["phase"] = kPhasePending;
      SetCondition(desired, "Submitted", true, "Submitted",
                   "submitted to the coordinator as " + submit_name, generation, world.now);
      actions.events.push_back(
          {"Normal", "Submitted",
           absl::StrCat("submitted as ", submit_name, " for ", stages, " worker pods")});
    }
    Finish(status, std::move(desired), actions);
    return actions;
  }

  MirrorCoordinator(*coordinator, desired);
  const std::string phase = StringField(desired, "phase");
  const std::string reason = coordinator->status().reason();
  SetCondition(desired, "Running", phase == kPhaseRunning,
               phase == kPhaseRunning ? "Training" : (reason.empty() ? phase : reason),
               phase == kPhaseRunning
                   ? absl::StrCat("attempt ", coordinator->status().attempt(), " on ", stages,
                                  " workers")
                   : "",
               generation, world.now);
  if (phase != phase_before) {
    if (phase == kPhaseRunning) {
      actions.events.push_back(
          {"Normal", "Running",
           absl::StrCat("training on ", stages, " workers (attempt ",
                        coordinator->status().attempt(), ")")});
    } else if (phase == kPhaseRestarting) {
      actions.events.push_back(
          {"Warning", "Restarting",
           absl::StrCat("a stage failed; restart ", coordinator->status().restarts(), ": ",
                        coordinator->status().message())});
    }
  }
  if (IsFinished(phase)) {
    if (!desired.contains("completionTime")) desired["completionTime"] = Rfc3339(world.now);
    const bool succeeded = phase == kPhaseSucceeded;
    SetCondition(desired, phase, true, reason.empty() ? phase : reason,
                 succeeded ? absl::StrFormat("step %d, train loss %.4f, validation loss %.4f",
                                             coordinator->status().step(),
                                             coordinator->status().train_loss(),
                                             coordinator->status().validation_loss())
                           : coordinator->status().message(),
                 generation, world.now);
    actions.events.push_back(
        {succeeded ? "Normal" : "Warning", phase,
         succeeded ? absl::StrFormat("finished %d steps, train loss %.4f",
                                     coordinator->status().step(),
                                     coordinator->status().train_loss())
                   : coordinator->status().message()});
    actions.requeue_after.reset();
    actions.create_pods.clear();
    actions.delete_pods.clear();
    DeleteAllPods(world, actions);
    ApplyTtl(spec, desired, world.now, actions);
  }
  Finish(status, std::move(desired), actions);
  return actions;
}

}  // namespace paci::op
