#pragma once

#include <atomic>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

#include "common/peer_identity.h"
#include "paci/v1/coordinator.grpc.pb.h"
#include "server/job_manager.h"

namespace paci {

struct CoordinatorServiceOptions {
  std::string token;        // bearer token clients must send; empty: none
  int max_watchers = 256;   // concurrent WatchJob streams
  // ... of one client: one certificate's common name, or one host without.
  int max_watchers_per_client = 64;
  // The common names of the administrators' certificates (--admin_identities);
  // any other name outside paci's own is refused (common/peer_identity.h).
  AdministratorNames administrators;
  // The highest run_policy.priority a tenant's job may have
  // (--tenant_max_priority); the operator and administrators may set any.
  int tenant_max_priority = 0;
};

// The WatchJob streams open now, in all and per client; a slot is taken for
// the life of a stream.
class WatcherSlots {
 public:
  WatcherSlots(int max_total, int max_per_client)
      : max_total_(max_total), max_per_client_(max_per_client) {}
  // ResourceExhausted naming the limit when `client` may not open another.
  absl::Status Take(const std::string& client) ABSL_LOCKS_EXCLUDED(mutex_);
  void Give(const std::string& client) ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  const int max_total_;
  const int max_per_client_;
  absl::Mutex mutex_;
  int total_ ABSL_GUARDED_BY(mutex_) = 0;
  std::map<std::string, int> per_client_ ABSL_GUARDED_BY(mutex_);
};

// Who a call comes from, for per-client limits: "cn:<common name>" of its
// client certificate, else "host:<peer address without its port>".
std::string ClientKey(const grpc::ServerContext& context);

// The gRPC adapter of the job API: authenticates, validates the request
// (sizes, names, the spec with ValidateJobSpec) and calls the JobManager.
// Thread-safe; the JobManager must outlive it.
class CoordinatorService final : public v1::Coordinator::Service {
 public:
  CoordinatorService(JobManager& manager, const CoordinatorServiceOptions& options);

  grpc::Status SubmitJob(grpc::ServerContext* context, const v1::SubmitJobRequest* request,
                         v1::Job* response) override;
  grpc::Status GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request,
                      v1::Job* response) override;
  grpc::Status ListJobs(grpc::ServerContext* context, const v1::ListJobsRequest* request,
                        v1::ListJobsResponse* response) override;
  grpc::Status CancelJob(grpc::ServerContext* context, const v1::CancelJobRequest* request,
                         v1::Job* response) override;
  grpc::Status UpdateRunPolicy(grpc::ServerContext* context,
                               const v1::UpdateRunPolicyRequest* request,
                               v1::Job* response) override;
  grpc::Status GetJobTrace(grpc::ServerContext* context, const v1::GetJobRequest* request,
                           v1::JobTrace* response) override;
  grpc::Status WatchJob(grpc::ServerContext* context, const v1::WatchJobRequest* request,
                        grpc::ServerWriter<v1::Job>* writer) override;

 private:
  // Authenticates the call and, when `name` is given, checks it; OK or the
  // status to answer with.
  grpc::Status Admit(const grpc::ServerContext& context, const std::string* name) const;
  // Who calls (common/peer_identity.h), with this coordinator's administrators.
  PeerIdentity Caller(const grpc::ServerContext& context) const {
    return IdentityOf(context, options_.administrators);
  }

  JobManager& manager_;
  const CoordinatorServiceOptions options_;
  WatcherSlots watchers_;
};

// absl::Status to grpc::Status, keeping code and message.
grpc::Status ToGrpc(const absl::Status& status);

// Checks a job name from a request: InvalidArgument naming the field.
absl::Status CheckJobName(const std::string& name, const char* field);

}  // namespace paci
