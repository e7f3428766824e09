#pragma once

// The coordinator as the operator uses it: submit, read and cancel jobs.
// An interface so the controller does not know about gRPC channels; the one
// implementation talks to a real paci_coordinator.

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/coordinator_client.h"
#include "paci/v1/coordinator.pb.h"

namespace paci::op {

class CoordinatorJobs {
 public:
  virtual ~CoordinatorJobs() = default;
  // Idempotent by spec.name. InvalidArgument names a bad field.
  virtual absl::StatusOr<v1::Job> Submit(const v1::JobSpec& spec,
                                         const std::map<std::string, std::string>& labels) = 0;
  // NotFound when the coordinator does not know `name`. The loss histories
  // only when asked for (the progress a poll mirrors needs none).
  virtual absl::StatusOr<v1::Job> Get(const std::string& name, bool with_loss_history) = 0;
  virtual absl::Status Cancel(const std::string& name) = 0;
  // Replaces a running job's run policy (the coordinator's UpdateRunPolicy).
  virtual absl::Status UpdateRunPolicy(const std::string& name, const v1::RunPolicy& policy) = 0;
};

// Thread-safe: gRPC stubs are.
class GrpcCoordinatorJobs : public CoordinatorJobs {
 public:
  explicit GrpcCoordinatorJobs(const CoordinatorClient& client,
                               absl::Duration timeout = absl::Seconds(10))
      : client_(client), timeout_(timeout) {}

  absl::StatusOr<v1::Job> Submit(const v1::JobSpec& spec,
                                 const std::map<std::string, std::string>& labels) override;
  absl::StatusOr<v1::Job> Get(const std::string& name, bool with_loss_history) override;
  absl::Status Cancel(const std::string& name) override;
  absl::Status UpdateRunPolicy(const std::string& name, const v1::RunPolicy& policy) override;

 private:
  const CoordinatorClient& client_;
  const absl::Duration timeout_;
};

}  // namespace paci::op
