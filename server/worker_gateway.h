#pragma once

#include <string>

#include "paci/v1/coordinator.grpc.pb.h"
#include "server/job_manager.h"

namespace paci {

// The gRPC adapter of the worker side: one bidirectional stream per worker.
// The first message must register the worker; then heartbeats and reports
// flow up, assignments and stops flow down (written by a writer thread the
// handler owns, so the JobManager only ever enqueues). The stream's end is
// the worker's disconnection. Thread-safe.
class WorkerGateway final : public v1::WorkerGateway::Service {
 public:
  WorkerGateway(JobManager& manager, std::string token);

  grpc::Status Connect(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::WorkerMessage>* stream) override;

 private:
  JobManager& manager_;
  const std::string token_;
};

}  // namespace paci
