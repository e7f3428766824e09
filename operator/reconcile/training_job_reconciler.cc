#include "operator/reconcile/training_job_reconciler.h"

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <google/protobuf/util/message_differencer.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/elastic_shape.h"
#include "common/job_spec.h"
#include "common/job_token.h"
#include "common/parity.h"
#include "common/peer_identity.h"
#include "operator/reconcile/coordinator_view.h"
#include "operator/reconcile/dataset_step.h"
#include "operator/reconcile/gang.h"
#include "operator/reconcile/job_objects.h"
#include "operator/reconcile/kueue_step.h"
#include "operator/reconcile/parity_step.h"
#include "operator/reconcile/pod_status.h"
#include "operator/reconcile/reconciliation.h"
#include "operator/api/worker_template.h"

namespace paci::op {

using kube::BeingDeleted;
using kube::Field;
using kube::Label;
using kube::MetaString;
using kube::Rfc3339;
using kube::StringField;
namespace {

using nlohmann::json;

// A submit the coordinator refuses for good: retrying cannot help.
bool RefusedForGood(const absl::Status& submitted) {
  return absl::IsInvalidArgument(submitted) || absl::IsAlreadyExists(submitted);
}

// The steps, in the order ReconcileTrainingJob tries them.

// Deleted: cancel at the coordinator, stop the workers, let the object go.
void ReconcileDeletion(Reconciliation& r) {
  if (r.CoordinatorActive()) {
    r.actions.cancel = r.coordinator_name;
    r.Event("Normal", "Cancelling", "cancelling " + r.coordinator_name + " at the coordinator");
  }
  r.DeleteAllPods();
  r.actions.remove_finalizer = r.job.metadata.HasFinalizer(kFinalizer);
}

// Finished (Succeeded, Failed, Cancelled): no workers; gone after its TTL.
void ReconcileFinished(Reconciliation& r) {
  r.DeleteAllPods(/*keep_dataset=*/true);
  FinishWorkload(r);
  r.ApplyTtl(r.status);
}

// What to submit: the JobSpec and, for a parity check, which of its runs.
struct Runnable {
  v1::JobSpec spec;
  std::optional<ParityRun> parity;
};

// What to submit, or what makes the spec one that cannot run.
absl::StatusOr<Runnable> RunnableJobSpec(const Reconciliation& r) {
  if (const std::string& ns = r.job.metadata.namespace_name;
      r.options.reserved_namespaces.count(ns) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "metadata.namespace: \"", ns,
        "\" is reserved for paci itself (it holds the release's CA and the operator's Secrets): "
        "create TrainingJobs in a namespace of their own (the chart's operator.watchNamespace or "
        "tls.workerNamespaces)"));
  }
  // The job as written; for a parity check, then the run of it to submit.
  absl::StatusOr<v1::JobSpec> job_spec =
      JobSpecFromTrainingJob(r.job, CoordinatorJobName(r.job));
  if (!job_spec.ok()) return job_spec.status();
  std::optional<ParityRun> parity;
  if (r.spec.parity) {
    if (absl::Status schedule = CheckParitySchedule(*job_spec); !schedule.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("spec.parity: spec.", schedule.message()));
    }
    absl::StatusOr<ParityRun> next =
        NextParityRun(r.spec, r.status, ParitySpecDigest(*job_spec));
    if (!next.ok()) return next.status();
    parity = *next;
  }
  const std::string submit_name =
      !r.coordinator_name.empty() ? r.coordinator_name
      : parity                    ? CoordinatorJobName(r.job, parity->number)
                                  : job_spec->name();
  if (parity) {
    job_spec = JobSpecFromTrainingJob(r.job, submit_name, ParityRunEdit(*parity, *r.spec.parity));
    if (!job_spec.ok()) return job_spec.status();
  }
  job_spec->set_name(submit_name);
  if (const int priority = job_spec->run_policy().priority(); priority > r.options.max_priority) {
    // The coordinator runs the operator's jobs at any priority: the bound is here.
    return absl::InvalidArgumentError(absl::StrCat(
        "spec.runPolicy.priority: ", priority, " is above ", r.options.max_priority,
        ", the highest a TrainingJob may ask for (the operator's --max_priority, the chart's "
        "operator.maxPriority)"));
  }
  if (!r.options.worker_token_key.empty()) {
    // Only workers holding the job's token (its pods, which mount it) are placed on it.
    (*job_spec->mutable_run_policy()->mutable_worker_selector())[kWorkerTokenLabel] =
        TokenDigest(JobToken(r.options.worker_token_key, r.job.metadata.uid));
  }
  if (absl::Status worker =
          ValidateWorkerTemplate(r.spec.worker.object, r.options.worker_allowed_secrets);
      !worker.ok()) {
    return worker;
  }
  if (!r.spec.initializer_error.ok()) return r.spec.initializer_error;
  return Runnable{*std::move(job_spec), parity};
}

// A spec that cannot run fails the job, naming the field.
void FailInvalidSpec(Reconciliation& r, const absl::Status& invalid) {
  FailJob(r, "InvalidSpec", std::string(invalid.message()));
  r.DeleteAllPods();
}

bool Suspended(const Reconciliation& r) { return r.spec.run_policy.suspend; }

// Suspended: nothing runs; resuming submits again (from its checkpoints).
void ReconcileSuspended(Reconciliation& r) {
  if (r.CoordinatorActive()) r.actions.cancel = r.coordinator_name;
  r.DeleteAllPods();
  DropWorkload(r);
  r.desired.phase = kPhaseSuspended;
  r.desired.coordinator_job.clear();
  r.SetCondition("Suspended", true, "Suspended", "spec.runPolicy.suspend is true");
  if (r.phase_before != kPhaseSuspended) r.Event("Normal", "Suspended", "stopped its workers");
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
  const std::string before = r.ObservedReason("WorkersBlocked", "True");
  std::string text = message;
  if (troubles.size() > 1) absl::StrAppend(&text, " (and ", troubles.size() - 1, " more)");
  r.SetCondition("WorkersBlocked", true, reason, text);
  if (before != reason) r.Event("Warning", reason, text);
}

// The gang gate (gang.h): once every worker pod exists, those at the gate are
// released together when the nodes have room for all of them (a replacement
// pod alone, beside the running ones); until then the WorkersAdmitted
// condition says what they wait for, with an Event when that changes.
void ReleaseGang(Reconciliation& r, int workers, const std::map<int, const json*>& by_index) {
  std::vector<json> gated;
  bool leaving = !r.actions.delete_pods.empty();
  for (const auto& [index, pod] : by_index) {
    leaving = leaving || BeingDeleted(*pod);
    if (HasGangGate(*pod)) gated.push_back(*pod);
  }
  if (gated.empty() || static_cast<int>(by_index.size()) < workers || leaving) {
    return;  // nothing waits, or not every pod is there (or staying) yet
  }
  const GangPlan plan = PlanGang(gated, r.world.nodes, r.world.cluster_pods);
  if (plan.fits) {
    std::vector<std::string> names;
    for (const json& pod : gated) {
      r.actions.release_pods.emplace_back(MetaString(pod, "name"), GatesWithoutGang(pod));
      names.push_back(MetaString(pod, "name"));
    }
    const std::string message =
        gated.size() == static_cast<size_t>(workers)
            ? absl::StrCat("all ", workers, " worker pods fit on the nodes: released together")
            : absl::StrCat("worker pod ", absl::StrJoin(names, ", "), " fits: released");
    r.SetCondition("WorkersAdmitted", true, "Released", message);
    r.Event("Normal", "Released", message);
    return;
  }
  const std::string before = r.ObservedReason("WorkersAdmitted", "False");
  r.SetCondition("WorkersAdmitted", false, plan.reason, plan.message);
  if (before != plan.reason) {
    r.Event(plan.reason == "Unschedulable" ? "Warning" : "Normal", plan.reason, plan.message);
  }
}

// The worker pods (one per stage) and their Service: missing ones are
// created, ended ones deleted (and created again once gone), strays deleted.
void EnsureWorkers(Reconciliation& r, int workers) {
  if (!r.world.service_exists) r.actions.create_service = WorkerService(r.job, r.options);
  if (r.options.network_policies && !r.world.network_policy_exists) {
    r.actions.create_network_policy = WorkerNetworkPolicy(r.job, r.options);
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
      r.actions.create_pods.push_back(WorkerPod(r.job, index, r.options));
    }
  }
  if (!r.actions.create_pods.empty() && !r.options.worker_token_key.empty()) {
    r.actions.create_token_secret = WorkerTokenSecret(r.job, r.options);
  }
  ReleaseGang(r, workers, by_index);
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
void SubmitToCoordinator(Reconciliation& r, v1::JobSpec job_spec, int workers) {
  const std::string submit_name = job_spec.name();
  if (!r.world.submit_result) {
    r.actions.submit = std::move(job_spec);
    r.actions.submit_labels = {{kNamespaceLabel, r.job.metadata.namespace_name}};
    if (r.phase_before == kPhaseSuspended && !r.actions.submit->checkpoint().directory().empty()) {
      r.actions.submit->mutable_checkpoint()->set_resume(true);  // on from before the suspension
    }
  }
  r.desired.coordinator_job = submit_name;
  if (r.phase_before.empty() || r.phase_before == kPhaseSuspended ||
      r.phase_before == kPhaseInitializing) {
    r.desired.phase = kPhasePending;
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
  if (r.desired.completion_time.empty()) r.desired.completion_time = Rfc3339(r.world.now);
  const bool succeeded = phase == kPhaseSucceeded;
  r.SetCondition(phase, true, s.reason().empty() ? phase : s.reason(),
                 succeeded ? absl::StrFormat("step %d, train loss %.4f, validation loss %.4f",
                                             s.step(), s.train_loss(), s.validation_loss())
                           : s.message());
  r.Event(succeeded ? "Normal" : "Warning", phase,
          succeeded ? absl::StrFormat("finished %d steps, train loss %.4f", s.step(), s.train_loss())
                    : s.message());
  r.StopWorkers();
  r.ApplyTtl(r.desired);
}

// The coordinator's view of the job in .status: the Running condition, an
// Event when it starts running or restarts, and the end when it has finished.
void MirrorStatus(Reconciliation& r, const std::optional<ParityRun>& parity) {
  const v1::JobStatus& s = r.coordinator->status();
  // The workers of the shape it runs at (an elastic job's may be fewer than its pods).
  const int workers = WorkersOf(r.coordinator->spec().pipeline());
  MirrorCoordinator(*r.coordinator, r.desired);
  if (parity && parity->number > 1 && !r.status.start_time.empty()) {
    r.desired.start_time = r.status.start_time;  // the check's, its first run's
  }
  const std::string phase = r.desired.phase;
  const bool running = phase == kPhaseRunning;
  r.SetCondition("Running", running,
                 running ? "Training" : (s.reason().empty() ? phase : s.reason()),
                 running ? absl::StrCat("attempt ", s.attempt(), " on ", workers, " workers") : "");
  // The coordinator's Stalled condition (a stage without progress), and an
  // elastic job's Resizing (an Event when a resize starts and when it is done).
  for (const v1::JobCondition& condition : s.conditions()) {
    if (condition.type() == "Stalled") {
      if (condition.status()) {
        r.SetCondition("Stalled", true, condition.reason(), condition.message());
      } else {
        r.ClearCondition("Stalled",
                         condition.reason().empty() ? "Progressing" : condition.reason());
      }
    } else if (condition.type() == "Resizing") {
      r.SetCondition("Resizing", condition.status(), condition.reason(), condition.message());
      // One Event per resize the coordinator counts, seen under way or done
      // (a poll may miss the short time between the decision and the placement).
      if (s.resizes() > r.status.resizes.value_or(0)) {
        r.Event("Normal", condition.status() ? "Resizing" : "Resized", condition.message());
      }
    }
  }
  if (phase != r.phase_before && running) {
    r.Event("Normal", "Running",
            absl::StrCat("training on ", workers, " workers (attempt ", s.attempt(), ")"));
  } else if (phase != r.phase_before && phase == kPhaseRestarting && s.reason() != "Resizing") {
    r.Event("Warning", "Restarting",
            absl::StrCat("a stage failed; restart ", s.restarts(), ": ", s.message()));
  }
  if (!IsFinished(phase)) return;
  if (parity && ParityRunEnded(r, phase, *parity)) return;  // the next run, or the check failed
  CoordinatorFinished(r, phase);
  if (parity && phase == kPhaseSucceeded) {
    r.SetCondition(kPhaseSucceeded, true, "ParityChecked", ParityOutcome(r));
  }
}

// spec.runPolicy changed while the job runs (backoffLimit,
// activeDeadlineSeconds, priority): the coordinator's copy follows, with an
// Event naming the new values.
void FollowRunPolicy(Reconciliation& r, const v1::JobSpec& job_spec) {
  if (!r.CoordinatorActive()) return;
  v1::RunPolicy wanted = job_spec.run_policy();
  // The worker selector stays as submitted (the coordinator refuses a change;
  // a new worker token key applies to jobs submitted after it).
  *wanted.mutable_worker_selector() = r.coordinator->spec().run_policy().worker_selector();
  if (google::protobuf::util::MessageDifferencer::Equals(r.coordinator->spec().run_policy(),
                                                         wanted)) {
    return;
  }
  r.actions.update_run_policy = RunPolicyUpdate{r.coordinator_name, wanted};
  r.Event("Normal", "RunPolicyUpdated",
          absl::StrCat("spec.runPolicy applies to ", r.coordinator_name, " from now: backoffLimit ",
                       wanted.backoff_limit(), ", activeDeadlineSeconds ",
                       wanted.active_deadline_seconds(), ", priority ", wanted.priority()));
}

// A job that is to run: its dataset, its workers, and its job at the
// coordinator.
void ReconcileRunning(Reconciliation& r, Runnable runnable) {
  // P x R pods: every stage of every replica (pipeline.data_parallel); for
  // an elastic job, its largest shape's (the coordinator runs the shape the
  // pods that start allow), or as many as Kueue admitted.
  const int most = MostWorkers(runnable.spec);
  const std::optional<int> admitted = KueueAdmits(r, {most, FewestWorkers(runnable.spec)});
  if (!admitted) return;
  r.ClearCondition("Suspended", "Resumed");
  if (!DatasetReady(r)) return;
  // Admitted in part: the pods and the job of the largest shape they allow.
  const std::optional<ElasticShape> shape = LargestShapeWithin(runnable.spec, *admitted);
  const int workers = shape ? shape->workers() : *admitted;
  EnsureWorkers(r, workers);
  r.actions.requeue_after = r.options.poll_interval;
  if (r.coordinator == nullptr) {
    if (runnable.parity) StartParityRun(r, *runnable.parity);
    if (workers < most) runnable.spec = ResizedJobSpec(runnable.spec, *shape);
    SubmitToCoordinator(r, std::move(runnable.spec), workers);
  } else {
    FollowRunPolicy(r, runnable.spec);
    MirrorStatus(r, runnable.parity);
  }
}

// The generation a Failed job failed at (its Failed condition's), or 0 when
// the job is not Failed.
int64_t FailedGeneration(const TrainingJob& job) {
  if (job.status.phase != kPhaseFailed) return 0;
  const kube::Condition* failed = job.status.FindCondition("Failed");
  if (failed == nullptr || failed->status != "True") return 0;
  return failed->observed_generation != 0 ? failed->observed_generation : job.metadata.generation;
}

// A Failed job whose spec changed since it failed (kubectl apply of a fixed
// spec) runs again, as a new coordinator job (its name has the generation):
// the job as if it had never been submitted, its Failed condition False.
TrainingJob AsRerun(const TrainingJob& job, absl::Time now) {
  TrainingJob again = job;
  TrainingJobStatus& status = again.status;
  status.phase.clear();
  status.coordinator_job.clear();
  status.message.clear();
  status.completion_time.clear();
  status.start_time.clear();
  status.parity.reset();
  for (kube::Condition& c : status.conditions) {
    if (c.type != "Failed") continue;
    c.status = "False";
    c.reason = "SpecChanged";
    c.message = absl::StrCat("generation ", job.metadata.generation,
                             " changed the spec after it failed: running again");
    c.last_transition_time = Rfc3339(now);
    c.observed_generation = job.metadata.generation;
  }
  return again;
}

ReconcileActions Reconcile(const TrainingJob& job, const ObservedWorld& world,
                           const ReconcilerOptions& options) {
  Reconciliation r(job, world, options);
  if (job.metadata.being_deleted) {
    ReconcileDeletion(r);
    return std::move(r.actions);
  }
  r.actions.add_finalizer = !job.metadata.HasFinalizer(kFinalizer);
  absl::StatusOr<Runnable> runnable;
  if (IsFinished(r.phase_before)) {
    ReconcileFinished(r);
  } else if (runnable = RunnableJobSpec(r); !runnable.ok()) {
    FailInvalidSpec(r, runnable.status());
  } else if (Suspended(r)) {
    ReconcileSuspended(r);
  } else {
    ReconcileRunning(r, *std::move(runnable));
  }
  if (json desired = StatusJson(r.desired); desired != StatusJson(r.status)) {
    r.actions.status = std::move(desired);
  }
  return std::move(r.actions);
}

}  // namespace

bool ReadsLossHistory(const TrainingJob& job) { return job.spec.parity.has_value(); }

ReconcileActions ReconcileTrainingJob(const ObservedWorld& world,
                                      const ReconcilerOptions& options) {
  const TrainingJob job = ParseTrainingJob(world.job);
  const int64_t failed_at = FailedGeneration(job);
  if (!job.metadata.being_deleted && failed_at != 0 && failed_at < job.metadata.generation) {
    const TrainingJob again = AsRerun(job, world.now);
    ObservedWorld fresh = world;
    fresh.coordinator_job.reset();
    ReconcileActions actions = Reconcile(again, fresh, options);
    if (!actions.status) actions.status = StatusJson(again.status);
    actions.events.insert(actions.events.begin(),
                          {"Normal", "Rerunning",
                           absl::StrCat("generation ", job.metadata.generation,
                                        " changed the spec after the job failed at generation ",
                                        failed_at, "; running it again")});
    return actions;
  }
  return Reconcile(job, world, options);
}

}  // namespace paci::op
