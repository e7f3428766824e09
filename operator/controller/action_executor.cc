#include "operator/controller/action_executor.h"

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "operator/reconcile/kueue.h"
#include "kube/object.h"
#include "operator/api/training_job.h"

namespace paci::op {

using nlohmann::json;
using kube::CollectionPath;
using kube::FinalizersWith;
using kube::FinalizersWithout;
using kube::MetaString;
using kube::Rfc3339;

namespace {

// Not-found on delete and already-exists on create mean the world is already
// as wanted.
absl::Status IgnoreNotFound(absl::Status status) {
  return absl::IsNotFound(status) ? absl::OkStatus() : status;
}
absl::Status IgnoreAlreadyExists(absl::Status status) {
  return absl::IsAlreadyExists(status) ? absl::OkStatus() : status;
}

std::string JobPath(const ObjectMeta& job) {
  return absl::StrCat(CollectionPath("paci.dev", "v1alpha1", job.namespace_name, "trainingjobs"),
                      "/", job.name);
}
std::string JobPath(const json& job) { return JobPath(ParseObjectMeta(job)); }

// The merge patch that sets metadata.finalizers, on the version last seen.
json FinalizersPatch(const json& job, json finalizers) {
  return {{"metadata",
           {{"finalizers", std::move(finalizers)},
            {"resourceVersion", ParseObjectMeta(job).resource_version}}}};
}

}  // namespace

ActionExecutor::ActionExecutor(kube::KubeClient& kube, CoordinatorJobs& coordinator,
                               ReconcilerOptions reconciler, std::string component, Clock& clock)
    : kube_(kube),
      coordinator_(coordinator),
      reconciler_(std::move(reconciler)),
      component_(std::move(component)),
      clock_(clock) {}

ActionExecutor::Result ActionExecutor::Execute(ObservedWorld world, ReconcileActions actions) {
  Result result;
  result.written = world.job;
  result.status = MakeChanges(world, actions, result.written);
  if (result.status.ok() && actions.submit) {
    world.submit_result = coordinator_.Submit(*actions.submit, actions.submit_labels).status();
    if (world.submit_result->ok()) {
      LOG(INFO) << "job " << ParseObjectMeta(world.job).Key() << ": submitted as "
                << actions.submit->name();
    }
    actions = ReconcileTrainingJob(world, reconciler_);  // its changes are made already
  }
  if (result.status.ok()) result.status = Report(actions, result.written);
  result.requeue_after = actions.requeue_after;
  return result;
}

absl::Status ActionExecutor::MakeChanges(const ObservedWorld& world,
                                         const ReconcileActions& actions, json& current) {
  const std::string ns = ParseObjectMeta(current).namespace_name;
  if (actions.add_finalizer) {
    ASSIGN_OR_RETURN(current, kube_.MergePatch(JobPath(current),
                                               FinalizersPatch(current, FinalizersWith(
                                                                            current, kFinalizer))));
  }
  if (actions.cancel) {
    RETURN_IF_ERROR(IgnoreNotFound(coordinator_.Cancel(*actions.cancel)));
    LOG(INFO) << "job " << ParseObjectMeta(current).Key() << ": cancelled " << *actions.cancel;
  }
  if (actions.update_run_policy) {
    const RunPolicyUpdate& update = *actions.update_run_policy;
    absl::Status updated = coordinator_.UpdateRunPolicy(update.coordinator_job, update.policy);
    if (absl::IsInvalidArgument(updated) || absl::IsFailedPrecondition(updated)) {
      // Not a retry: the job runs on under its old policy, and the Warning says
      // why (the spec was validated before, so this is a race with its end).
      RecordEvent(current, {"Warning", "RunPolicyRefused", std::string(updated.message())});
    } else {
      RETURN_IF_ERROR(updated);
    }
  }
  const std::string pods = CollectionPath("", "v1", ns, "pods");
  for (const std::string& pod : actions.delete_pods) {
    RETURN_IF_ERROR(IgnoreNotFound(kube_.Delete(absl::StrCat(pods, "/", pod))));
  }
  if (actions.create_service) {
    RETURN_IF_ERROR(IgnoreAlreadyExists(
        kube_.Create(CollectionPath("", "v1", ns, "services"), *actions.create_service).status()));
  }
  if (actions.create_network_policy) {
    RETURN_IF_ERROR(IgnoreAlreadyExists(
        kube_.Create(CollectionPath("networking.k8s.io", "v1", ns, "networkpolicies"),
                     *actions.create_network_policy)
            .status()));
  }
  const std::string workloads = CollectionPath("kueue.x-k8s.io", "v1beta2", ns, "workloads");
  if (actions.create_workload) {
    RETURN_IF_ERROR(IgnoreAlreadyExists(kube_.Create(workloads, *actions.create_workload).status()));
  }
  if (actions.delete_workload && world.workload) {
    RETURN_IF_ERROR(IgnoreNotFound(
        kube_.Delete(absl::StrCat(workloads, "/", MetaString(*world.workload, "name")))));
  }
  if (actions.delete_workload_slice && world.workload_slice) {
    RETURN_IF_ERROR(IgnoreNotFound(
        kube_.Delete(absl::StrCat(workloads, "/", MetaString(*world.workload_slice, "name")))));
  }
  if (actions.workload_status && world.workload) {
    const WorkloadStatusEdit& edit = *actions.workload_status;
    const absl::Time now = clock_.Now();
    RETURN_IF_ERROR(IgnoreNotFound(
        kube_
            .UpdateStatus(absl::StrCat(workloads, "/", MetaString(*world.workload, "name")),
                          *world.workload,
                          [&](json& workload) {
                            if (edit.release_quota) {
                              ReleaseQuota(workload, now);
                            } else {
                              MarkFinished(workload, edit.reason, edit.message, now);
                            }
                          })
            .status()));
    LOG(INFO) << "job " << ParseObjectMeta(current).Key() << ": workload "
              << MetaString(*world.workload, "name")
              << (edit.release_quota ? ": quota given back after its eviction" : ": finished");
  }
  if (actions.create_token_secret) {
    RETURN_IF_ERROR(IgnoreAlreadyExists(
        kube_.Create(CollectionPath("", "v1", ns, "secrets"), *actions.create_token_secret)
            .status()));
  }
  for (const json& pod : actions.create_pods) {
    RETURN_IF_ERROR(IgnoreAlreadyExists(kube_.Create(pods, pod).status()));
  }
  for (const auto& [pod, gates] : actions.release_pods) {
    // Gates can only be taken away; null drops the field when none is left.
    const json patch = {{"spec", {{"schedulingGates", gates.empty() ? json() : gates}}}};
    RETURN_IF_ERROR(kube_.MergePatch(absl::StrCat(pods, "/", pod), patch).status());
  }
  return absl::OkStatus();
}

absl::Status ActionExecutor::Report(const ReconcileActions& actions, json& current) {
  for (const KubeEvent& event : actions.events) RecordEvent(current, event);
  if (actions.status) {
    const json& desired = *actions.status;
    ASSIGN_OR_RETURN(current, kube_.UpdateStatus(JobPath(current), current,
                                                 [&](json& object) { object["status"] = desired; }));
  }
  RETURN_IF_ERROR(actions.retry_error);
  if (actions.remove_finalizer) {
    RETURN_IF_ERROR(IgnoreNotFound(
        kube_
            .MergePatch(JobPath(current),
                        FinalizersPatch(current, FinalizersWithout(current, kFinalizer)))
            .status()));
    LOG(INFO) << "job " << ParseObjectMeta(current).Key() << ": finalized";
  }
  if (actions.delete_job) {
    LOG(INFO) << "job " << ParseObjectMeta(current).Key()
              << ": deleting, ttlSecondsAfterFinished has passed";
    RETURN_IF_ERROR(IgnoreNotFound(kube_.Delete(JobPath(current))));
  }
  return absl::OkStatus();
}

void ActionExecutor::RecordEvent(const json& involved, const KubeEvent& event) {
  const ObjectMeta job = ParseObjectMeta(involved);
  const std::string& ns = job.namespace_name;
  const std::string now = Rfc3339(clock_.Now());
  const json object = {
      {"apiVersion", "v1"},
      {"kind", "Event"},
      {"metadata", {{"generateName", job.name + "."}, {"namespace", ns}}},
      {"involvedObject",
       {{"apiVersion", "paci.dev/v1alpha1"},
        {"kind", "TrainingJob"},
        {"name", job.name},
        {"namespace", ns},
        {"uid", job.uid},
        {"resourceVersion", job.resource_version}}},
      {"reason", event.reason},
      {"message", event.message},
      {"type", event.type},
      {"source", {{"component", component_}}},
      {"reportingComponent", component_},
      {"firstTimestamp", now},
      {"lastTimestamp", now},
      {"count", 1},
  };
  LOG(INFO) << "job " << job.Key() << ": " << event.type << " " << event.reason << ": "
            << event.message;
  if (absl::Status s = kube_.Create(CollectionPath("", "v1", ns, "events"), object).status();
      !s.ok()) {
    LOG(WARNING) << "event " << event.reason << ": " << s;
  }
}

}  // namespace paci::op
