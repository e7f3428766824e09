#include "common/coordinator_client.h"

#include <utility>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

ABSL_FLAG(std::string, coordinator_tls_ca, "",
          "PEM CA that signed the coordinator's certificate: talk to it over TLS");
ABSL_FLAG(std::string, coordinator_tls_cert, "",
          "PEM client certificate to present to the coordinator (mutual TLS)");
ABSL_FLAG(std::string, coordinator_tls_key, "", "PEM private key for --coordinator_tls_cert");
ABSL_FLAG(std::string, coordinator_auth_token_file, "",
          "file holding the bearer token to present to the coordinator");

namespace paci {

absl::Status FromGrpc(const grpc::Status& status, absl::string_view what) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(what, ": ", status.error_message()));
}

absl::StatusOr<std::unique_ptr<CoordinatorClient>> CoordinatorClient::Connect(
    const CoordinatorClientOptions& options) {
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      MakeChannelCredentials(options.tls);
  if (!credentials.ok()) return credentials.status();
  std::shared_ptr<grpc::Channel> channel =
      CreateCoordinatorChannel(options.address, *credentials, options.reconnect_quickly);
  return std::unique_ptr<CoordinatorClient>(new CoordinatorClient(options, std::move(channel)));
}

CoordinatorClient::CoordinatorClient(const CoordinatorClientOptions& options,
                                     std::shared_ptr<grpc::Channel> channel)
    : address_(options.address),
      token_(options.token),
      wait_for_ready_(options.wait_for_ready),
      jobs_(v1::Coordinator::NewStub(channel)),
      gateway_(v1::WorkerGateway::NewStub(channel)) {}

std::unique_ptr<grpc::ClientContext> CoordinatorClient::Context(absl::Duration timeout) const {
  auto context = std::make_unique<grpc::ClientContext>();
  if (timeout != absl::InfiniteDuration()) {
    context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  }
  if (!token_.empty()) context->AddMetadata("authorization", "Bearer " + token_);
  if (wait_for_ready_) context->set_wait_for_ready(true);
  return context;
}

absl::StatusOr<v1::Job> CoordinatorClient::Submit(const v1::SubmitJobRequest& request,
                                                  absl::Duration timeout) const {
  v1::Job job;
  const grpc::Status status = jobs_->SubmitJob(Context(timeout).get(), request, &job);
  if (!status.ok()) return FromGrpc(status, "coordinator SubmitJob " + request.spec().name());
  return job;
}

absl::StatusOr<v1::Job> CoordinatorClient::Get(const v1::GetJobRequest& request,
                                               absl::Duration timeout) const {
  v1::Job job;
  const grpc::Status status = jobs_->GetJob(Context(timeout).get(), request, &job);
  if (!status.ok()) return FromGrpc(status, "coordinator GetJob " + request.name());
  return job;
}

absl::StatusOr<v1::ListJobsResponse> CoordinatorClient::List(const v1::ListJobsRequest& request,
                                                             absl::Duration timeout) const {
  v1::ListJobsResponse response;
  const grpc::Status status = jobs_->ListJobs(Context(timeout).get(), request, &response);
  if (!status.ok()) return FromGrpc(status, "coordinator ListJobs");
  return response;
}

absl::StatusOr<v1::Job> CoordinatorClient::Cancel(const std::string& name,
                                                  absl::Duration timeout) const {
  v1::CancelJobRequest request;
  request.set_name(name);
  v1::Job job;
  const grpc::Status status = jobs_->CancelJob(Context(timeout).get(), request, &job);
  if (!status.ok()) return FromGrpc(status, "coordinator CancelJob " + name);
  return job;
}

absl::StatusOr<v1::Job> CoordinatorClient::UpdateRunPolicy(const std::string& name,
                                                           const v1::RunPolicy& policy,
                                                           absl::Duration timeout) const {
  v1::UpdateRunPolicyRequest request;
  request.set_name(name);
  *request.mutable_run_policy() = policy;
  v1::Job job;
  const grpc::Status status = jobs_->UpdateRunPolicy(Context(timeout).get(), request, &job);
  if (!status.ok()) return FromGrpc(status, "coordinator UpdateRunPolicy " + name);
  return job;
}

absl::StatusOr<v1::JobTrace> CoordinatorClient::Trace(const std::string& name,
                                                      absl::Duration timeout) const {
  v1::GetJobRequest request;
  request.set_name(name);
  v1::JobTrace trace;
  const grpc::Status status = jobs_->GetJobTrace(Context(timeout).get(), request, &trace);
  if (!status.ok()) return FromGrpc(status, "coordinator GetJobTrace " + name);
  return trace;
}

absl::StatusOr<CoordinatorClientOptions> CoordinatorClientOptionsFromFlags(
    const std::string& address, bool reconnect_quickly) {
  CoordinatorClientOptions options;
  options.address = address;
  options.reconnect_quickly = reconnect_quickly;
  options.tls = TlsFiles{absl::GetFlag(FLAGS_coordinator_tls_cert),
                         absl::GetFlag(FLAGS_coordinator_tls_key),
                         absl::GetFlag(FLAGS_coordinator_tls_ca)};
  const std::string token_file = absl::GetFlag(FLAGS_coordinator_auth_token_file);
  if (!token_file.empty()) {
    absl::StatusOr<std::string> token = ReadTokenFile(token_file);
    if (!token.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--coordinator_auth_token_file: ", token.status().message()));
    }
    options.token = *token;
  }
  // The files are read now, so that a bad one is named at start-up.
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      MakeChannelCredentials(options.tls);
  if (!credentials.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--coordinator_tls_ca/--coordinator_tls_cert/--coordinator_tls_key: ",
        credentials.status().message()));
  }
  return options;
}

}  // namespace paci
