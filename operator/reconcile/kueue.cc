#include "operator/reconcile/kueue.h"

#include <utility>

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

}  // namespace

std::string QueueName(const ObjectMeta& job) { return job.Label(kQueueNameLabel); }

std::string PriorityClassName(const ObjectMeta& job) { return job.Label(kPriorityClassLabel); }

std::string WorkloadName(const ObjectMeta& job) {
  const std::string suffix = "-" + job.uid.substr(0, 8);
  std::string name = job.name;
  constexpr size_t kMaxName = 253;  // a DNS subdomain
  if (name.size() + suffix.size() > kMaxName) name.resize(kMaxName - suffix.size());
  return name + suffix;
}

json JobWorkload(const TrainingJob& job, WorkerCount workers, const json& worker_pod,
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
          {"metadata", OwnedMetadata(job.metadata, WorkloadName(job.metadata))},
          {"spec", std::move(spec)}};
}

Admission ReadAdmission(const json& workload) {
  Admission admission;
  const json& status = Field(workload, "status");
  if (const json* finished = FindCondition(status, "Finished"); IsTrue(finished)) {
    admission.state = Admission::kFinished;
    admission.reason = StringField(*finished, "reason");
    admission.message = StringField(*finished, "message");
    return admission;
  }
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
