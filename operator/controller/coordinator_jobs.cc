#include "operator/controller/coordinator_jobs.h"

namespace paci::op {

absl::StatusOr<v1::Job> GrpcCoordinatorJobs::Submit(
    const v1::JobSpec& spec, const std::map<std::string, std::string>& labels) {
  v1::SubmitJobRequest request;
  *request.mutable_spec() = spec;
  request.mutable_labels()->insert(labels.begin(), labels.end());
  return client_.Submit(request, timeout_);
}

absl::StatusOr<v1::Job> GrpcCoordinatorJobs::Get(const std::string& name,
                                                 bool with_loss_history) {
  v1::GetJobRequest request;
  request.set_name(name);
  request.set_omit_loss_history(!with_loss_history);
  return client_.Get(request, timeout_);
}

absl::Status GrpcCoordinatorJobs::Cancel(const std::string& name) {
  return client_.Cancel(name, timeout_).status();
}

absl::Status GrpcCoordinatorJobs::UpdateRunPolicy(const std::string& name,
                                                  const v1::RunPolicy& policy) {
  return client_.UpdateRunPolicy(name, policy, timeout_).status();
}

}  // namespace paci::op
