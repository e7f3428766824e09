#pragma once

#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "paci/v1/job.pb.h"
#include "paci/v1/stage.grpc.pb.h"
#include "tools/job_progress.h"

namespace paci {

struct JobControlServiceOptions {
  // How long one Join waits for the other stages (or less, if the caller's
  // deadline is sooner) before DEADLINE_EXCEEDED.
  absl::Duration join_timeout = absl::Seconds(120);
  // Told to every stage in its JoinResponse: record the first this many
  // timeline spans and send them with the reports; 0: none.
  int trace_max_spans = 0;
};

// The JobControl gRPC service of one local job: the join barrier and the
// entry point of stage reports. Validates each request (job name, stage
// range, duplicate joins, string lengths) and feeds JobProgress, which holds
// all the job's state. An empty job_name is taken as this job's: a worker
// started with only --job_control and --stage learns the name from Join.
//
// Join blocks a sync-server thread until every stage has joined, Stop() is
// called or the join timeout passes. Report never blocks.
//
// Thread-safe. `progress` must outlive the service; call Stop() before
// shutting down the server so that no Join holds it up.
class JobControlService final : public v1::JobControl::Service {
 public:
  static constexpr size_t kMaxStringLength = 1024;  // names and addresses
  static constexpr size_t kMaxPathLength = 4096;    // checkpoint paths
  static constexpr size_t kMaxErrorLength = 4096;   // longer errors are cut

  JobControlService(const v1::JobSpec& spec, JobProgress& progress,
                    const JobControlServiceOptions& options = {});

  // OK with the spec and every stage's address once all stages have joined.
  // INVALID_ARGUMENT (wrong job name, stage out of range, a string too long),
  // ALREADY_EXISTS (the stage has joined), DEADLINE_EXCEEDED, or CANCELLED
  // when the launcher is stopping.
  grpc::Status Join(grpc::ServerContext* context, const v1::JoinRequest* request,
                    v1::JoinResponse* response) override;

  // Records the report; the ack says cancel once Stop() was called.
  // INVALID_ARGUMENT (wrong job name, stage out of range, a path too long) or
  // FAILED_PRECONDITION (the stage has not joined).
  grpc::Status Report(grpc::ServerContext* context, const v1::StageReport* request,
                      v1::ReportAck* response) override;

  // The launcher is stopping: waiting Joins return CANCELLED, later Reports
  // are acked with cancel = true. Does not block.
  void Stop();

 private:
  // OK for "" and this job's name; INVALID_ARGUMENT naming both otherwise.
  grpc::Status CheckJobName(const std::string& job_name) const;
  // Every stage has joined, or Stop() was called.
  bool JoinDone() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const v1::JobSpec spec_;
  JobProgress& progress_;
  const JobControlServiceOptions options_;

  absl::Mutex mu_;
  int joined_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace paci
