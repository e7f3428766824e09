#include "operator/reconcile/dataset_step.h"

#include <cstdint>
#include <string>

#include "absl/strings/str_cat.h"
#include "operator/reconcile/job_objects.h"
#include "kube/object.h"
#include "operator/api/training_job.h"
#include "operator/reconcile/pod_status.h"

namespace paci::op {

using nlohmann::json;
using kube::BeingDeleted;
using kube::Field;
using kube::Label;
using kube::MetaString;
using kube::StringField;

namespace {

// Whether condition `type` of `status` is True, set for `generation`.
bool ConditionTrueAt(const TrainingJobStatus& status, const std::string& type, int64_t generation) {
  const kube::Condition* c = status.FindCondition(type);
  return c != nullptr && c->status == "True" && c->observed_generation == generation;
}

}  // namespace

bool DatasetReady(Reconciliation& r) {
  if (!r.spec.dataset || !r.coordinator_name.empty()) return true;
  const DatasetInitializerSpec& dataset = *r.spec.dataset;
  if (ConditionTrueAt(r.status, "DatasetReady", r.generation)) return true;
  const std::string pod_name = DatasetPodName(r.job.metadata.name);
  const std::string folder = r.spec.job.ok() ? r.spec.job->data().dataset() : "";
  const json* pod = nullptr;
  for (const json& p : r.world.pods) {
    if (Label(p, kRoleLabel) == kDatasetRole) pod = &p;
  }
  r.desired.phase = kPhaseInitializing;
  r.actions.requeue_after = r.options.poll_interval;
  const auto preparing = [&](const std::string& reason, const std::string& message) {
    r.SetCondition("DatasetReady", false, reason, message);
  };
  if (pod == nullptr) {
    r.actions.create_pods.push_back(DatasetPod(r.job, r.options));
    preparing("Preparing", absl::StrCat("pod ", pod_name, " prepares ", folder));
    if (r.phase_before != kPhaseInitializing) {
      r.Event("Normal", "PreparingDataset",
              absl::StrCat("pod ", pod_name, " prepares ", folder, " from ",
                           dataset.source.size(), " source path(s)"));
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

}  // namespace paci::op
