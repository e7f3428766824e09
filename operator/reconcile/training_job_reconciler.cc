#include "operator/reconcile/training_job_reconciler.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <utility>
#include <vector>

#include <google/protobuf/util/json_util.h>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/job_phase.h"
#include "common/job_spec.h"
#include "operator/reconcile/job_objects.h"

namespace paci::op {
namespace {

using nlohmann::json;

constexpr char kPhaseInitializing[] = "Initializing";
constexpr char kPhasePending[] = "Pending";
constexpr char kPhaseSuspended[] = "Suspended";
constexpr char kPhaseRunning[] = "Running";
constexpr char kPhaseRestarting[] = "Restarting";
constexpr char kPhaseSucceeded[] = "Succeeded";
constexpr char kPhaseFailed[] = "Failed";
constexpr char kPhaseCancelled[] = "Cancelled";

absl::Time FromTimestamp(const google::protobuf::Timestamp& ts) {
  return absl::FromUnixSeconds(ts.seconds()) + absl::Nanoseconds(ts.nanos());
}

bool IsFinished(const std::string& phase) {
  return phase == kPhaseSucceeded || phase == kPhaseFailed || phase == kPhaseCancelled;
}

// A submit the coordinator refuses for good: retrying cannot help.
bool RefusedForGood(const absl::Status& submitted) {
  return absl::IsInvalidArgument(submitted) || absl::IsAlreadyExists(submitted);
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
  // The limit the drift keeps within, and the accumulation that keeps it (derived
  // when the spec gave only pipeline.maxDrift).
  status["driftLimit"] = DriftLimit(job.spec().pipeline());
  status["accumulation"] = job.spec().pipeline().accumulation();
  if (s.has_start_time()) status["startTime"] = Rfc3339(FromTimestamp(s.start_time()));
  if (s.has_completion_time()) {
    status["completionTime"] = Rfc3339(FromTimestamp(s.completion_time()));
  }
}

// One reconcile: what every step reads (the observation and the parts of the
// object it names) and what the steps build (the desired status, the actions).
struct Reconciliation {
  Reconciliation(const ObservedWorld& world, const ReconcilerOptions& options)
      : world(world),
        options(options),
        spec(Field(world.job, "spec")),
        status(Field(world.job, "status")),
        generation(Generation(world.job)),
        phase_before(StringField(status, "phase")),
        coordinator_name(StringField(status, "coordinatorJob")),
        coordinator(world.coordinator_job ? &*world.coordinator_job : nullptr),
        desired(status.is_object() ? status : json::object()) {
    desired["observedGeneration"] = generation;
  }

  bool CoordinatorActive() const {
    return coordinator != nullptr && !IsTerminal(coordinator->status().phase());
  }
  void Event(const char* type, const std::string& reason, const std::string& message) {
    actions.events.push_back({type, reason, message});
  }

  // Sets condition `type` in the desired status.conditions, keeping its
  // transition time when its truth does not change.
  void SetCondition(const std::string& type, bool value, const std::string& reason,
                    const std::string& message) {
    json& conditions = desired["conditions"];
    if (!conditions.is_array()) conditions = json::array();
    const std::string truth = value ? "True" : "False";
    for (json& condition : conditions) {
      if (StringField(condition, "type") != type) continue;
      if (StringField(condition, "status") != truth) {
        condition["lastTransitionTime"] = Rfc3339(world.now);
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
                              {"lastTransitionTime", Rfc3339(world.now)}});
  }

  // Clears a condition that was set before; absent ones stay absent.
  void ClearCondition(const std::string& type, const std::string& reason) {
    const json& conditions = Field(desired, "conditions");
    if (!conditions.is_array()) return;
    for (const json& condition : conditions) {
      if (StringField(condition, "type") == type && StringField(condition, "status") == "True") {
        SetCondition(type, false, reason, "");
        return;
      }
    }
  }

  // Deletes every pod of the job not already on its way out; with
  // keep_dataset, all but the dataset initializer's, which ended by itself:
  // its log stays readable (pacictl logs --dataset) until the job goes.
  void DeleteAllPods(bool keep_dataset = false) {
    for (const json& pod : world.pods) {
      if (BeingDeleted(pod) || (keep_dataset && Label(pod, kRoleLabel) == kDatasetRole)) continue;
      actions.delete_pods.push_back(MetaString(pod, "name"));
    }
  }

  // Deletes the object once ttlSecondsAfterFinished has passed since it
  // finished (by `finished_status`.completionTime).
  void ApplyTtl(const json& finished_status) {
    const json& ttl = Field(Field(spec, "runPolicy"), "ttlSecondsAfterFinished");
    if (!ttl.is_number_integer()) return;
    absl::Time completed;
    if (!ParseRfc3339(StringField(finished_status, "completionTime"), &completed)) {
      completed = world.now;
    }
    const absl::Duration left = completed + absl::Seconds(ttl.get<int64_t>()) - world.now;
    if (left <= absl::ZeroDuration()) {
      actions.delete_job = true;
    } else {
      actions.requeue_after = left;
    }
  }

  const ObservedWorld& world;
  const ReconcilerOptions& options;
  const json& spec;
  const json& status;  // as observed
  const int64_t generation;
  const std::string phase_before;
  const std::string coordinator_name;  // status.coordinatorJob
  const v1::Job* const coordinator;    // what the coordinator says of it, or nullptr
  json desired;                        // the status as it should be
  ReconcileActions actions;
};

// The steps, in the order ReconcileTrainingJob tries them.

// Deleted: cancel at the coordinator, stop the workers, let the object go.
void ReconcileDeletion(Reconciliation& r) {
  if (r.CoordinatorActive()) {
    r.actions.cancel = r.coordinator_name;
    r.Event("Normal", "Cancelling", "cancelling " + r.coordinator_name + " at the coordinator");
  }
  r.DeleteAllPods();
  r.actions.remove_finalizer = HasFinalizer(r.world.job, kFinalizer);
}

// Finished (Succeeded, Failed, Cancelled): no workers; gone after its TTL.
void ReconcileFinished(Reconciliation& r) {
  r.DeleteAllPods(/*keep_dataset=*/true);
  r.ApplyTtl(r.status);
}

// The JobSpec to submit, or what makes the spec one that cannot run.
absl::StatusOr<v1::JobSpec> RunnableJobSpec(const Reconciliation& r) {
  const std::string submit_name =
      r.coordinator_name.empty() ? CoordinatorJobName(r.world.job) : r.coordinator_name;
  absl::StatusOr<v1::JobSpec> job_spec = JobSpecFromTrainingJob(r.world.job, submit_name);
  if (!job_spec.ok()) return job_spec;
  if (absl::Status worker = ValidateWorkerTemplate(Field(r.spec, "worker")); !worker.ok()) {
    return worker;
  }
  if (absl::Status initializer = ValidateInitializer(r.spec); !initializer.ok()) {
    return initializer;
  }
  return job_spec;
}

// The job fails for good: Failed with its condition, its completion time (so
// ttlSecondsAfterFinished counts from it) and a Warning Event.
void FailJob(Reconciliation& r, const std::string& reason, const std::string& message) {
  r.desired["phase"] = kPhaseFailed;
  r.desired["message"] = message;
  r.desired["completionTime"] = Rfc3339(r.world.now);
  r.SetCondition("Failed", true, reason, message);
  r.Event("Warning", reason, message);
}

// A spec that cannot run fails the job, naming the field.
void FailInvalidSpec(Reconciliation& r, const absl::Status& invalid) {
  FailJob(r, "InvalidSpec", std::string(invalid.message()));
  r.DeleteAllPods();
}

bool Suspended(const Reconciliation& r) {
  return Field(Field(r.spec, "runPolicy"), "suspend") == json(true);
}

// Suspended: nothing runs; resuming submits again (from its checkpoints).
void ReconcileSuspended(Reconciliation& r) {
  if (r.CoordinatorActive()) r.actions.cancel = r.coordinator_name;
  r.DeleteAllPods();
  r.desired["phase"] = kPhaseSuspended;
  r.desired.erase("coordinatorJob");
  r.SetCondition("Suspended", true, "Suspended", "spec.runPolicy.suspend is true");
  if (r.phase_before != kPhaseSuspended) r.Event("Normal", "Suspended", "stopped its workers");
}

// The worker pods (one per stage) and their Service: missing ones are
// created, ended ones deleted (and created again once gone), strays deleted.
// What keeps a worker pod from running, as its status says: a container
// waiting to be pulled or created, or crashing; or no node for it.
// {reason, message}; an empty reason when nothing does.
std::pair<std::string, std::string> PodTrouble(const json& pod) {
  static const std::set<std::string> kWaiting = {
      "ErrImagePull",          "ImagePullBackOff",      "InvalidImageName", "CrashLoopBackOff",
      "CreateContainerConfigError", "CreateContainerError", "RunContainerError"};
  const json& status = Field(pod, "status");
  const json& containers = Field(status, "containerStatuses");
  if (containers.is_array()) {
    for (const json& container : containers) {
      const json& waiting = Field(Field(container, "state"), "waiting");
      const std::string reason = StringField(waiting, "reason");
      if (kWaiting.count(reason) != 0) return {reason, StringField(waiting, "message")};
    }
  }
  const json& conditions = Field(status, "conditions");
  if (conditions.is_array()) {
    for (const json& condition : conditions) {
      if (StringField(condition, "type") == "PodScheduled" &&
          StringField(condition, "status") == "False" &&
          StringField(condition, "reason") == "Unschedulable") {
        return {"Unschedulable", StringField(condition, "message")};
      }
    }
  }
  return {};
}

// How a worker pod's container ended: " (OOMKilled, exit code 137)", or "".
std::string HowItEnded(const json& pod) {
  const json& containers = Field(Field(pod, "status"), "containerStatuses");
  if (!containers.is_array()) return "";
  for (const json& container : containers) {
    const json& terminated = Field(Field(container, "state"), "terminated");
    if (!terminated.is_object()) continue;
    const std::string reason = StringField(terminated, "reason");
    return absl::StrCat(", ", reason.empty() ? "terminated" : reason, ", exit code ",
                        IntField(terminated, "exitCode", 0));
  }
  return "";
}

// The WorkersBlocked condition: true, naming the pod and why, while a pod
// cannot start (an image that cannot be pulled, no node for it, ...), with a
// Warning Event when that begins or its reason changes.
void ReportBlockedWorkers(Reconciliation& r, const std::vector<std::pair<std::string, std::string>>&
                                                 troubles) {
  if (troubles.empty()) {
    r.ClearCondition("WorkersBlocked", "WorkersStarted");
    return;
  }
  const auto& [reason, message] = troubles.front();
  std::string before;
  const json& conditions = Field(r.status, "conditions");
  if (conditions.is_array()) {
    for (const json& c : conditions) {
      if (StringField(c, "type") == "WorkersBlocked" && StringField(c, "status") == "True") {
        before = StringField(c, "reason");
      }
    }
  }
  std::string text = message;
  if (troubles.size() > 1) absl::StrAppend(&text, " (and ", troubles.size() - 1, " more)");
  r.SetCondition("WorkersBlocked", true, reason, text);
  if (before != reason) r.Event("Warning", reason, text);
}

void EnsureWorkers(Reconciliation& r, int workers) {
  if (!r.world.service_exists) r.actions.create_service = WorkerService(r.world.job, r.options);
  if (r.options.network_policies && !r.world.network_policy_exists) {
    r.actions.create_network_policy = WorkerNetworkPolicy(r.world.job, r.options);
  }
  std::map<int, const json*> by_index;
  std::vector<std::pair<std::string, std::string>> troubles;
  for (const json& pod : r.world.pods) {
    if (Label(pod, kRoleLabel) == kDatasetRole) continue;  // DatasetReady's
    int index = -1;
    try {
      index = std::stoi(Label(pod, kWorkerIndexLabel));
    } catch (const std::exception&) {
    }
    const std::string pod_name = MetaString(pod, "name");
    const std::string pod_phase = StringField(Field(pod, "status"), "phase");
    if (index < 0 || index >= workers) {
      if (!BeingDeleted(pod)) r.actions.delete_pods.push_back(pod_name);
      continue;
    }
    by_index[index] = &pod;
    if (!BeingDeleted(pod) && (pod_phase == "Failed" || pod_phase == "Succeeded")) {
      r.actions.delete_pods.push_back(pod_name);
      r.Event("Warning", "WorkerExited",
              absl::StrCat("worker pod ", pod_name, " ended (", pod_phase, HowItEnded(pod),
                           "); replacing it"));
    } else if (auto [reason, message] = PodTrouble(pod); !reason.empty()) {
      troubles.emplace_back(reason, absl::StrCat("pod ", pod_name, ": ", reason,
                                                 message.empty() ? "" : ": ", message));
    }
  }
  ReportBlockedWorkers(r, troubles);
  for (int index = 0; index < workers; ++index) {
    if (by_index.count(index) == 0) {
      r.actions.create_pods.push_back(WorkerPod(r.world.job, index, r.options));
    }
  }
}

// What the coordinator answered to the submit (the second call, see the header).
void ApplySubmitResult(Reconciliation& r, const absl::Status& submitted) {
  if (submitted.ok()) return;
  if (!RefusedForGood(submitted)) {
    r.actions.retry_error = submitted;  // the status as submitted; retried with backoff
    return;
  }
  FailJob(r, "SubmitRejected", std::string(submitted.message()));
  r.actions.requeue_after.reset();
}

// Not submitted yet, or the coordinator lost it: submitting is idempotent.
void SubmitToCoordinator(Reconciliation& r, v1::JobSpec job_spec) {
  const std::string submit_name = job_spec.name();
  const int workers = WorkersOf(job_spec.pipeline());
  if (!r.world.submit_result) {
    r.actions.submit = std::move(job_spec);
    if (r.phase_before == kPhaseSuspended && !r.actions.submit->checkpoint().directory().empty()) {
      r.actions.submit->mutable_checkpoint()->set_resume(true);  // on from before the suspension
    }
  }
  r.desired["coordinatorJob"] = submit_name;
  if (r.phase_before.empty() || r.phase_before == kPhaseSuspended ||
      r.phase_before == kPhaseInitializing) {
    r.desired["phase"] = kPhasePending;
    r.SetCondition("Submitted", true, "Submitted", "submitted to the coordinator as " + submit_name);
    r.Event("Normal", "Submitted",
            absl::StrCat("submitted as ", submit_name, " for ", workers, " worker pods"));
  }
  if (r.world.submit_result) ApplySubmitResult(r, *r.world.submit_result);
}

// The coordinator says the job has finished: its condition and Event, the
// workers stopped, the TTL started.
void CoordinatorFinished(Reconciliation& r, const std::string& phase) {
  const v1::JobStatus& s = r.coordinator->status();
  if (!r.desired.contains("completionTime")) r.desired["completionTime"] = Rfc3339(r.world.now);
  const bool succeeded = phase == kPhaseSucceeded;
  r.SetCondition(phase, true, s.reason().empty() ? phase : s.reason(),
                 succeeded ? absl::StrFormat("step %d, train loss %.4f, validation loss %.4f",
                                             s.step(), s.train_loss(), s.validation_loss())
                           : s.message());
  r.Event(succeeded ? "Normal" : "Warning", phase,
          succeeded ? absl::StrFormat("finished %d steps, train loss %.4f", s.step(), s.train_loss())
                    : s.message());
  r.actions.requeue_after.reset();
  r.actions.create_pods.clear();
  r.actions.delete_pods.clear();
  r.DeleteAllPods(/*keep_dataset=*/true);
  r.ApplyTtl(r.desired);
}

// The coordinator's view of the job in .status: the Running condition, an
// Event when it starts running or restarts, and the end when it has finished.
void MirrorStatus(Reconciliation& r, int workers) {
  const v1::JobStatus& s = r.coordinator->status();
  MirrorCoordinator(*r.coordinator, r.desired);
  const std::string phase = StringField(r.desired, "phase");
  const bool running = phase == kPhaseRunning;
  r.SetCondition("Running", running,
                 running ? "Training" : (s.reason().empty() ? phase : s.reason()),
                 running ? absl::StrCat("attempt ", s.attempt(), " on ", workers, " workers") : "");
  // The coordinator's Stalled condition: a stage without progress.
  for (const v1::JobCondition& condition : s.conditions()) {
    if (condition.type() != "Stalled") continue;
    if (condition.status()) {
      r.SetCondition("Stalled", true, condition.reason(), condition.message());
    } else {
      r.ClearCondition("Stalled", condition.reason().empty() ? "Progressing" : condition.reason());
    }
  }
  if (phase != r.phase_before && running) {
    r.Event("Normal", "Running",
            absl::StrCat("training on ", workers, " workers (attempt ", s.attempt(), ")"));
  } else if (phase != r.phase_before && phase == kPhaseRestarting) {
    r.Event("Warning", "Restarting",
            absl::StrCat("a stage failed; restart ", s.restarts(), ": ", s.message()));
  }
  if (IsFinished(phase)) CoordinatorFinished(r, phase);
}

bool ConditionTrueAt(const json& status, const std::string& type, int64_t generation) {
  const json& conditions = Field(status, "conditions");
  if (!conditions.is_array()) return false;
  for (const json& c : conditions) {
    if (StringField(c, "type") == type) {
      return StringField(c, "status") == "True" && IntField(c, "observedGeneration", 0) == generation;
    }
  }
  return false;
}

// The termination message of a pod's container (its closing line or error).
std::string TerminationMessage(const json& pod) {
  const json& containers = Field(Field(pod, "status"), "containerStatuses");
  if (!containers.is_array()) return "";
  for (const json& container : containers) {
    const std::string message =
        StringField(Field(Field(container, "state"), "terminated"), "message");
    const absl::string_view trimmed = absl::StripTrailingAsciiWhitespace(message);
    if (!trimmed.empty()) return std::string(trimmed);
  }
  return "";
}

// spec.initializer.dataset, before the job is first submitted (and again on
// a new generation): the dataset pod runs prepare-data into spec.data.dataset
// once, and nothing else starts until it has succeeded. The DatasetReady
// condition tells where it is; a failed pod fails the job with its error.
// True when the dataset is ready, or the job has none to prepare.
bool DatasetReady(Reconciliation& r) {
  if (!HasDatasetInitializer(r.spec) || !r.coordinator_name.empty()) return true;
  const json& dataset = Field(Field(r.spec, "initializer"), "dataset");
  if (ConditionTrueAt(r.status, "DatasetReady", r.generation)) return true;
  const std::string pod_name = DatasetPodName(MetaString(r.world.job, "name"));
  const std::string folder = StringField(Field(r.spec, "data"), "dataset");
  const json* pod = nullptr;
  for (const json& p : r.world.pods) {
    if (Label(p, kRoleLabel) == kDatasetRole) pod = &p;
  }
  r.desired["phase"] = kPhaseInitializing;
  r.actions.requeue_after = r.options.poll_interval;
  const auto preparing = [&](const std::string& reason, const std::string& message) {
    r.SetCondition("DatasetReady", false, reason, message);
  };
  if (pod == nullptr) {
    r.actions.create_pods.push_back(DatasetPod(r.world.job, r.options));
    preparing("Preparing", absl::StrCat("pod ", pod_name, " prepares ", folder));
    if (r.phase_before != kPhaseInitializing) {
      r.Event("Normal", "PreparingDataset",
              absl::StrCat("pod ", pod_name, " prepares ", folder, " from ",
                           Field(dataset, "source").size(), " source path(s)"));
    }
    return false;
  }
  const std::string made_for =
      StringField(Field(Field(*pod, "metadata"), "annotations"), kGenerationAnnotation);
  if (BeingDeleted(*pod) || made_for != std::to_string(r.generation)) {
    // Made for an earlier spec: gone first, then made again for this one.
    if (!BeingDeleted(*pod)) r.actions.delete_pods.push_back(MetaString(*pod, "name"));
    preparing("Preparing", absl::StrCat("replacing pod ", pod_name, " of an earlier generation"));
    return false;
  }
  const std::string pod_phase = StringField(Field(*pod, "status"), "phase");
  const std::string message = TerminationMessage(*pod);
  if (pod_phase == "Succeeded") {
    r.SetCondition("DatasetReady", true, "Prepared", message);
    r.Event("Normal", "DatasetPrepared", message.empty() ? folder + " is ready" : message);
    return true;
  }
  if (pod_phase == "Failed") {
    r.actions.requeue_after.reset();
    r.SetCondition("DatasetReady", false, "Failed", message);
    FailJob(r, "DatasetFailed",
            absl::StrCat("the dataset initializer (pod ", pod_name, HowItEnded(*pod), ") failed",
                         message.empty() ? "" : ": ", message));
    return false;
  }
  if (auto [reason, trouble] = PodTrouble(*pod); !reason.empty()) {
    preparing(reason, absl::StrCat("pod ", pod_name, ": ", reason, trouble.empty() ? "" : ": ",
                                   trouble));
  } else if (r.world.dataset_progress && !r.world.dataset_progress->empty()) {
    preparing("Preparing", absl::StrCat("pod ", pod_name, ": ", *r.world.dataset_progress));
  } else {
    preparing("Preparing", absl::StrCat("pod ", pod_name, " is preparing ", folder,
                                        " (kubectl logs -f ", pod_name, ")"));
  }
  return false;
}

// A job that is to run: its dataset, its workers, and its job at the
// coordinator.
void ReconcileRunning(Reconciliation& r, v1::JobSpec job_spec) {
  r.ClearCondition("Suspended", "Resumed");
  if (!DatasetReady(r)) return;
  // P x R pods: every stage of every replica (pipeline.data_parallel).
  const int workers = WorkersOf(job_spec.pipeline());
  EnsureWorkers(r, workers);
  r.actions.requeue_after = r.options.poll_interval;
  if (r.coordinator == nullptr) {
    SubmitToCoordinator(r, std::move(job_spec));
  } else {
    MirrorStatus(r, workers);
  }
}

}  // namespace

// The generation a Failed job failed at (its Failed condition's), or 0 when
// the job is not Failed.
int64_t FailedGeneration(const json& job) {
  const json& status = Field(job, "status");
  if (StringField(status, "phase") != kPhaseFailed) return 0;
  const json& conditions = Field(status, "conditions");
  if (!conditions.is_array()) return 0;
  for (const json& c : conditions) {
    if (StringField(c, "type") == "Failed" && StringField(c, "status") == "True") {
      return IntField(c, "observedGeneration", Generation(job));
    }
  }
  return 0;
}

// A Failed job whose spec changed since it failed (kubectl apply of a fixed
// spec) runs again, as a new coordinator job (its name has the generation):
// the world as if it had never been submitted, its Failed condition False.
ObservedWorld AsRerun(const ObservedWorld& world) {
  ObservedWorld again = world;
  json& status = again.job["status"];
  for (const char* key : {"phase", "coordinatorJob", "message", "completionTime", "startTime"}) {
    status.erase(key);
  }
  for (json& c : status["conditions"]) {
    if (StringField(c, "type") != "Failed") continue;
    c["status"] = "False";
    c["reason"] = "SpecChanged";
    c["message"] = absl::StrCat("generation ", Generation(world.job),
                                " changed the spec after it failed: running again");
    c["lastTransitionTime"] = Rfc3339(world.now);
    c["observedGeneration"] = Generation(world.job);
  }
  again.coordinator_job.reset();
  return again;
}

ReconcileActions ReconcileTrainingJob(const ObservedWorld& world,
                                      const ReconcilerOptions& options) {
  const int64_t failed_at = FailedGeneration(world.job);
  if (!BeingDeleted(world.job) && failed_at != 0 && failed_at < Generation(world.job)) {
    const ObservedWorld again = AsRerun(world);
    ReconcileActions actions = ReconcileTrainingJob(again, options);
    if (!actions.status) actions.status = Field(again.job, "status");
    actions.events.insert(actions.events.begin(),
                          {"Normal", "Rerunning",
                           absl::StrCat("generation ", Generation(world.job),
                                        " changed the spec after the job failed at generation ",
                                        failed_at, "; running it again")});
    return actions;
  }
  Reconciliation r(world, options);
  if (BeingDeleted(world.job)) {
    ReconcileDeletion(r);
    return std::move(r.actions);
  }
  r.actions.add_finalizer = !HasFinalizer(world.job, kFinalizer);
  absl::StatusOr<v1::JobSpec> job_spec;
  if (IsFinished(r.phase_before)) {
    ReconcileFinished(r);
  } else if (job_spec = RunnableJobSpec(r); !job_spec.ok()) {
    FailInvalidSpec(r, job_spec.status());
  } else if (Suspended(r)) {
    ReconcileSuspended(r);
  } else {
    ReconcileRunning(r, *std::move(job_spec));
  }
  if (r.desired != r.status) r.actions.status = std::move(r.desired);
  return std::move(r.actions);
}

std::string WorkerSelectorValue(const json& job) {
  return MetaString(job, "namespace") + "." + MetaString(job, "name");
}

std::string CoordinatorJobName(const json& job) {
  const std::string suffix =
      absl::StrCat("-", MetaString(job, "uid").substr(0, 8), "-g", Generation(job));
  std::string name = MetaString(job, "name");
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
