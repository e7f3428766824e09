#include "operator/controller/coordinator_jobs.h"

#include "absl/strings/str_cat.h"

namespace paci::op {
namespace {
absl::Status FromGrpc(const grpc::Status& status, const std::string& what) {
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat("coordinator ", what, ": ", status.error_message()));
}
}  // namespace

GrpcCoordinatorJobs::GrpcCoordinatorJobs(std::shared_ptr<grpc::Channel> channel,
                                         std::string bearer_token, absl::Duration timeout)
    : stub_(v1::Coordinator::NewStub(channel)), token_(std::move(bearer_token)), timeout_(timeout) {}

std::unique_ptr<grpc::ClientContext> GrpcCoordinatorJobs::Context() const {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout_));
  if (!token_.empty()) context->AddMetadata("authorization", "Bearer " + token_);
  return context;
}

absl::StatusOr<v1::Job> GrpcCoordinatorJobs::Submit(const v1::JobSpec& spec) {
  v1::SubmitJobRequest request;
  *request.mutable_spec() = spec;
  v1::Job job;
  grpc::Status status = stub_->SubmitJob(Context().get(), request, &job);
  if (!status.ok()) return FromGrpc(status, "SubmitJob " + spec.name());
  return job;
}

absl::StatusOr<v1::Job> GrpcCoordinatorJobs::Get(const std::string& name) {
  v1::GetJobRequest request;
  request.set_name(name);
  request.set_omit_loss_history(true);  // it mirrors progress, not the history
  v1::Job job;
  grpc::Status status = stub_->GetJob(Context().get(), request, &job);
  if (!status.ok()) return FromGrpc(status, "GetJob " + name);
  return job;
}

absl::Status GrpcCoordinatorJobs::Cancel(const std::string& name) {
  v1::CancelJobRequest request;
  request.set_name(name);
  v1::Job job;
  grpc::Status status = stub_->CancelJob(Context().get(), request, &job);
  if (!status.ok()) return FromGrpc(status, "CancelJob " + name);
  return absl::OkStatus();
}

}  // namespace paci::op
