#include "operator/reconcile/reconciliation.h"

#include "absl/time/time.h"
#include "common/job_phase.h"

namespace paci::op {

using nlohmann::json;
using kube::BeingDeleted;
using kube::Field;
using kube::FindCondition;
using kube::Label;
using kube::MetaString;
using kube::ParseRfc3339;
using kube::Rfc3339;
using kube::SetStatusCondition;
using kube::StringField;

bool Reconciliation::CoordinatorActive() const {
  return coordinator != nullptr && !IsTerminal(coordinator->status().phase());
}

void Reconciliation::SetCondition(const std::string& type, bool value, const std::string& reason,
                                  const std::string& message) {
  SetStatusCondition(desired, type, value, reason, message, generation, world.now);
}

std::string Reconciliation::ObservedReason(const std::string& type, const char* truth) const {
  const json* condition = FindCondition(status, type);
  return condition != nullptr && StringField(*condition, "status") == truth
             ? StringField(*condition, "reason")
             : "";
}

void Reconciliation::ClearCondition(const std::string& type, const std::string& reason) {
  const json& conditions = Field(desired, "conditions");
  if (!conditions.is_array()) return;
  for (const json& condition : conditions) {
    if (StringField(condition, "type") == type && StringField(condition, "status") == "True") {
      SetCondition(type, false, reason, "");
      return;
    }
  }
}

void Reconciliation::DeleteAllPods(bool keep_dataset) {
  for (const json& pod : world.pods) {
    if (BeingDeleted(pod) || (keep_dataset && Label(pod, kRoleLabel) == kDatasetRole)) continue;
    actions.delete_pods.push_back(MetaString(pod, "name"));
  }
}

void Reconciliation::ApplyTtl(const json& finished_status) {
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

void Reconciliation::StopWorkers() {
  actions.requeue_after.reset();
  actions.create_pods.clear();
  actions.create_token_secret.reset();
  actions.delete_pods.clear();
  DeleteAllPods(/*keep_dataset=*/true);
}

void FailJob(Reconciliation& r, const std::string& reason, const std::string& message) {
  r.desired["phase"] = kPhaseFailed;
  r.desired["message"] = message;
  r.desired["completionTime"] = Rfc3339(r.world.now);
  r.SetCondition("Failed", true, reason, message);
  r.Event("Warning", reason, message);
}

}  // namespace paci::op
