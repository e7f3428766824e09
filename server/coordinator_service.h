#pragma once

#include <atomic>
#include <string>

#include "paci/v1/coordinator.grpc.pb.h"
#include "server/job_manager.h"

namespace paci {

struct CoordinatorServiceOptions {
  std::string token;        // bearer token clients must send; empty: none
  int max_watchers = 256;   // concurrent WatchJob streams
};

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
  grpc::Status GetJobTrace(grpc::ServerContext* context, const v1::GetJobRequest* request,
                           v1::JobTrace* response) override;
  grpc::Status WatchJob(grpc::ServerContext* context, const v1::WatchJobRequest* request,
                        grpc::ServerWriter<v1::Job>* writer) override;

 private:
  // Authenticates the call and, when `name` is given, checks it; OK or the
  // status to answer with.
  grpc::Status Admit(const grpc::ServerContext& context, const std::string* name) const;

  JobManager& manager_;
  const CoordinatorServiceOptions options_;
  std::atomic<int> watchers_{0};
};

// absl::Status to grpc::Status, keeping code and message.
grpc::Status ToGrpc(const absl::Status& status);

// Checks a job name from a request: InvalidArgument naming the field.
absl::Status CheckJobName(const std::string& name, const char* field);

}  // namespace paci
