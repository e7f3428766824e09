#pragma once

// The one way a paci process reaches the coordinator: pacictl, the local
// launcher, the worker agent and the operator. One channel (TLS when asked),
// the bearer token on every call, a deadline per call, and one mapping of
// gRPC's status to absl's.

#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/grpc_security.h"
#include "paci/v1/coordinator.grpc.pb.h"

namespace paci {

struct CoordinatorClientOptions {
  std::string address;  // host:port
  TlsFiles tls;         // all empty: plaintext
  std::string token;    // bearer token; empty: none
  // For the processes that must find a restarted coordinator again within
  // about a second (workers, the operator): CreateCoordinatorChannel's backoff.
  bool reconnect_quickly = false;
  // Calls wait for the channel to connect instead of failing at once (a
  // coordinator that has only just started); their deadlines still hold.
  bool wait_for_ready = false;
};

// The coordinator's status as absl's: the same code, the message prefixed
// with `what` ("coordinator SubmitJob tiny: ..."). OK for OK.
absl::Status FromGrpc(const grpc::Status& status, absl::string_view what);

// Thread-safe: gRPC stubs are.
class CoordinatorClient {
 public:
  // InvalidArgument naming the TLS file that cannot be read.
  static absl::StatusOr<std::unique_ptr<CoordinatorClient>> Connect(
      const CoordinatorClientOptions& options);

  const std::string& address() const { return address_; }

  // A call's context: a deadline `timeout` from now (InfiniteDuration: none)
  // and the bearer token.
  std::unique_ptr<grpc::ClientContext> Context(absl::Duration timeout) const;

  // The services, for streams (WatchJob, WorkerGateway.Connect): with a Context.
  v1::Coordinator::Stub& jobs() const { return *jobs_; }
  v1::WorkerGateway::Stub& gateway() const { return *gateway_; }

  // The unary calls, each within `timeout`; errors as FromGrpc gives them,
  // naming the call and the job.
  absl::StatusOr<v1::Job> Submit(const v1::SubmitJobRequest& request,
                                 absl::Duration timeout) const;
  absl::StatusOr<v1::Job> Get(const v1::GetJobRequest& request, absl::Duration timeout) const;
  absl::StatusOr<v1::ListJobsResponse> List(const v1::ListJobsRequest& request,
                                            absl::Duration timeout) const;
  absl::StatusOr<v1::Job> Cancel(const std::string& name, absl::Duration timeout) const;
  absl::StatusOr<v1::Job> UpdateRunPolicy(const std::string& name, const v1::RunPolicy& policy,
                                          absl::Duration timeout) const;
  absl::StatusOr<v1::JobTrace> Trace(const std::string& name, absl::Duration timeout) const;

 private:
  CoordinatorClient(const CoordinatorClientOptions& options,
                    std::shared_ptr<grpc::Channel> channel);

  const std::string address_;
  const std::string token_;
  const bool wait_for_ready_;
  std::unique_ptr<v1::Coordinator::Stub> jobs_;
  std::unique_ptr<v1::WorkerGateway::Stub> gateway_;
};

// The flags every client binary reads the coordinator's security from
// (--coordinator_tls_ca, --coordinator_tls_cert, --coordinator_tls_key,
// --coordinator_auth_token_file), defined once here; --coordinator itself is
// each binary's (their defaults differ). InvalidArgument naming the flag
// whose file cannot be read.
absl::StatusOr<CoordinatorClientOptions> CoordinatorClientOptionsFromFlags(
    const std::string& address, bool reconnect_quickly);

}  // namespace paci
