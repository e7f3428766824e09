#include "operator/api/training_job.h"

#include "absl/strings/str_cat.h"

namespace paci::op {

using nlohmann::json;

std::string WorkerServiceName(const std::string& job_name) { return job_name + "-workers"; }

std::string WorkerPodName(const std::string& job_name, int index) {
  return absl::StrCat(job_name, "-worker-", index);
}

std::string DatasetPodName(const std::string& job_name) { return job_name + "-dataset"; }

std::string WorkerTokenSecretName(const std::string& job_name) {
  return job_name + kWorkerTokenSecretSuffix;
}

json WorkerLabels(const std::string& job_name) {
  return {{kJobNameLabel, job_name}, {kRoleLabel, kWorkerRole}};
}

bool IsFinished(const std::string& phase) {
  return phase == kPhaseSucceeded || phase == kPhaseFailed || phase == kPhaseCancelled;
}

}  // namespace paci::op
