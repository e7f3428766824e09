#include "operator/reconcile/reconciliation.h"

#include "absl/time/time.h"
#include "common/job_phase.h"

namespace paci::op {

using nlohmann::json;
using kube::BeingDeleted;
using kube::Label;
using kube::MetaString;
using kube::ParseRfc3339;
using kube::Rfc3339;

bool Reconciliation::CoordinatorActive() const {
  return coordinator != nullptr && !IsTerminal(coordinator->status().phase());
}

void Reconciliation::SetCondition(const std::string& type, bool value, const std::string& reason,
                                  const std::string& message) {
  kube::SetCondition(desired.conditions, type, value, reason, message, generation, world.now);
}

std::string Reconciliation::ObservedReason(const std::string& type, const char* truth) const {
  const kube::Condition* condition = status.FindCondition(type);
  return condition != nullptr && condition->status == truth ? condition->reason : "";
}

void Reconciliation::ClearCondition(const std::string& type, const std::string& reason) {
  const kube::Condition* condition = desired.FindCondition(type);
  if (condition != nullptr && condition->status == "True") SetCondition(type, false, reason, "");
}

void Reconciliation::DeleteAllPods(bool keep_dataset) {
  for (const json& pod : world.pods) {
    if (BeingDeleted(pod) || (keep_dataset && Label(pod, kRoleLabel) == kDatasetRole)) continue;
    actions.delete_pods.push_back(MetaString(pod, "name"));
  }
}

void Reconciliation::ApplyTtl(const TrainingJobStatus& finished_status) {
  const std::optional<int64_t>& ttl = spec.run_policy.ttl_seconds_after_finished;
  if (!ttl) return;
  absl::Time completed;
  if (!ParseRfc3339(finished_status.completion_time, &completed)) completed = world.now;
  const absl::Duration left = completed + absl::Seconds(*ttl) - world.now;
  if (left <= absl::ZeroDuration()) {
    actions.delete_job = true;
  } else {
    actions.requeue_after = left;
  }
}

void Reconciliation::StopWorkers() {
  actions.requeue_after.reset();
  actions.create_pods.clear();
  actions.create_token_secret.reset();
  actions.delete_pods.clear();
  DeleteAllPods(/*keep_dataset=*/true);
}

void FailJob(Reconciliation& r, const std::string& reason, const std::string& message) {
  r.desired.phase = kPhaseFailed;
  r.desired.message = message;
  r.desired.completion_time = Rfc3339(r.world.now);
  r.SetCondition("Failed", true, reason, message);
  r.Event("Warning", reason, message);
}

}  // namespace paci::op
