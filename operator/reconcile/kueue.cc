#include "operator/reconcile/kueue.h"

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "operator/reconcile/job_objects.h"
#include "kube/object.h"
#include "operator/api/training_job.h"

namespace paci::op {

using nlohmann::json;
using kube::Field;
using kube::FindCondition;
using kube::Generation;
using kube::IntField;
using kube::MetaString;
using kube::SetStatusCondition;
using kube::StringField;

namespace {

// The Workload's one pod set.
constexpr char kWorkerPodSet[] = "workers";

// Kueue's workloadslicing.WorkloadSliceReplacementFor: "<namespace>/<name>"
// of the slice a Workload replaces.
constexpr char kWorkloadSliceReplacementFor[] = "kueue.x-k8s.io/workload-slice-replacement-for";
// The Finished reason of a slice another replaced (kueue.WorkloadSliceReplaced).
constexpr char kWorkloadSliceReplaced[] = "WorkloadSliceReplaced";

// Kueue keeps a condition's message to 32 KiB (api.TruncateConditionMessage).
constexpr size_t kMaxConditionMessage = 32 * 1024;

bool IsTrue(const json* condition) {
  return condition != nullptr && StringField(*condition, "status") == "True";
}

// Sets a condition of the Workload's status, its message cut to Kueue's
// 32 KiB (api.TruncateConditionMessage).
void SetCondition(json& workload, const char* type, bool value, const std::string& reason,
                  std::string message, absl::Time now) {
  if (message.size() > kMaxConditionMessage) message.resize(kMaxConditionMessage);
  SetStatusCondition(workload["status"], type, value, reason, message, Generation(workload), now);
}

// "<name>-<uid8><slice>", the name cut so the whole is a DNS subdomain.
std::string WorkloadNameWith(const ObjectMeta& job, const std::string& slice) {
  const std::string suffix = "-" + job.uid.substr(0, 8) + slice;
  std::string name = job.name;
  constexpr size_t kMaxName = 253;  // a DNS subdomain
  if (name.size() + suffix.size() > kMaxName) name.resize(kMaxName - suffix.size());
  return name + suffix;
}

// The slice number of `workload`, a Workload name of the job: 1 for
// WorkloadName, n for its n-th slice, 0 for a name of no slice of the job.
int SliceNumber(const ObjectMeta& job, const std::string& workload) {
  if (workload == WorkloadName(job)) return 1;
  const std::string uid = "-" + job.uid.substr(0, 8) + "-";
  const size_t at = workload.rfind(uid);
  int n = 0;
  if (at == std::string::npos || !absl::SimpleAtoi(workload.substr(at + uid.size()), &n) ||
      n < 2 || WorkloadNameWith(job, absl::StrCat("-", n)) != workload) {
    return 0;
  }
  return n;
}

}  // namespace

std::string QueueName(const ObjectMeta& job) { return job.Label(kQueueNameLabel); }

std::string PriorityClassName(const ObjectMeta& job) { return job.Label(kPriorityClassLabel); }

std::string WorkloadName(const ObjectMeta& job) { return WorkloadNameWith(job, ""); }

std::string CurrentWorkloadName(const ObjectMeta& job, const std::string& status_workload) {
  return SliceNumber(job, status_workload) > 0 ? status_workload : WorkloadName(job);
}

std::string NextWorkloadName(const ObjectMeta& job, const std::string& current) {
  return WorkloadNameWith(job, absl::StrCat("-", std::max(SliceNumber(job, current), 1) + 1));
}

json WorkloadSlice(const TrainingJob& job, const json& workload, const std::string& name,
                   int workers) {
  json slice = {{"apiVersion", "kueue.x-k8s.io/v1beta2"},
                {"kind", "Workload"},
                {"metadata", OwnedMetadata(job.metadata, name)},
                {"spec", Field(workload, "spec")}};
  slice["metadata"]["annotations"][kWorkloadSliceReplacementFor] =
      absl::StrCat(job.metadata.namespace_name, "/", MetaString(workload, "name"));
  for (json& pod_set : slice["spec"]["podSets"]) {
    if (StringField(pod_set, "name") != kWorkerPodSet) continue;
    pod_set["count"] = workers;
    pod_set.erase("minCount");
  }
  return slice;
}

bool ReplacedBySlice(const json& workload) {
  return ReadAdmission(workload).state == Admission::kReplaced;
}

bool IsWorkloadSlice(const json& workload) {
  return !StringField(Field(Field(workload, "metadata"), "annotations"),
                      kWorkloadSliceReplacementFor)
              .empty();
}

json JobWorkload(const TrainingJob& job, const std::string& name, WorkerCount workers,
                 const json& worker_pod,
                 const std::optional<json>& priority_class) {
  json pod_set = {{"name", kWorkerPodSet},
                  {"count", workers.most},
                  {"template",
                   {{"metadata", {{"labels", Field(Field(worker_pod, "metadata"), "labels")}}},
                    {"spec", Field(worker_pod, "spec")}}}};
  if (workers.fewest < workers.most) pod_set["minCount"] = workers.fewest;
  json spec = {{"queueName", QueueName(job.metadata)},
               {"podSets", json::array({std::move(pod_set)})}};
  if (priority_class) {
    spec["priorityClassRef"] = {{"group", "kueue.x-k8s.io"},
                                {"kind", "WorkloadPriorityClass"},
                                {"name", MetaString(*priority_class, "name")}};
    spec["priority"] = IntField(*priority_class, "value", 0);
  } else {
    spec["priority"] = job.spec.run_policy.priority;
  }
  return {{"apiVersion", "kueue.x-k8s.io/v1beta2"},
          {"kind", "Workload"},
          {"metadata", OwnedMetadata(job.metadata, name)},
          {"spec", std::move(spec)}};
}

Admission ReadAdmission(const json& workload) {
  Admission admission;
  const json& status = Field(workload, "status");
  const bool reserved = status.is_object() && status.contains("admission") &&
                        status["admission"].is_object();
  admission.cluster_queue = StringField(Field(status, "admission"), "clusterQueue");
  const json& assignments = Field(Field(status, "admission"), "podSetAssignments");
  if (assignments.is_array()) {
    for (const json& assignment : assignments) {
      if (StringField(assignment, "name") != kWorkerPodSet) continue;
      if (const std::optional<int64_t> count = kube::OptionalIntField(assignment, "count")) {
        admission.admitted_workers = static_cast<int>(*count);
      }
    }
  }
  if (const json* finished = FindCondition(status, "Finished"); IsTrue(finished)) {
    admission.reason = StringField(*finished, "reason");
    admission.message = StringField(*finished, "message");
    kube::ParseRfc3339(StringField(*finished, "lastTransitionTime"), &admission.since);
    admission.state = admission.reason == kWorkloadSliceReplaced ? Admission::kReplaced
                                                                 : Admission::kFinished;
    return admission;
  }
  if (const json* evicted = FindCondition(status, "Evicted"); reserved && IsTrue(evicted)) {
    admission.state = Admission::kEvicted;
    admission.reason = StringField(*evicted, "reason");
    admission.message = StringField(*evicted, "message");
    return admission;
  }
  if (const json* admitted = FindCondition(status, "Admitted"); reserved && IsTrue(admitted)) {
    admission.state = Admission::kAdmitted;
    admission.reason = StringField(*admitted, "reason");
    admission.message = StringField(*admitted, "message");
    return admission;
  }
  // Pending: QuotaReserved says why (Kueue writes it once it has looked).
  if (const json* reserved_condition = FindCondition(status, "QuotaReserved")) {
    admission.reason = StringField(*reserved_condition, "reason");
    admission.message = StringField(*reserved_condition, "message");
  }
  if (admission.reason.empty()) {
    admission.reason = "Queued";
    admission.message = "Kueue has not looked at it yet";
  }
  if (reserved && admission.reason == "QuotaReserved") {
    admission.reason = "AdmissionChecks";
    admission.message = absl::StrCat("quota reserved in ClusterQueue ", admission.cluster_queue,
                                     "; waiting for its admission checks");
  }
  return admission;
}

void ReleaseQuota(json& workload, absl::Time now) {
  const json* evicted = FindCondition(Field(workload, "status"), "Evicted");
  const std::string reason = evicted ? StringField(*evicted, "reason") : "";
  const std::string message = evicted ? StringField(*evicted, "message") : "";
  // Requeued at once after a preemption or a node failure; otherwise Kueue
  // decides when (after a back-off, or when the queue is started again).
  const bool requeue = reason == "Preempted" || reason == "NodeFailures";
  SetCondition(workload, "Requeued", requeue, reason.empty() ? "Evicted" : reason, message, now);
  SetCondition(workload, "QuotaReserved", false, "Pending", message, now);
  workload["status"].erase("admission");
  SetCondition(workload, "Admitted", false, "NoReservation", "The workload has no reservation",
               now);
}

void MarkFinished(json& workload, const std::string& reason, const std::string& message,
                  absl::Time now) {
  SetCondition(workload, "Finished", true, reason, message, now);
}

}  // namespace paci::op
