#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <prometheus/registry.h>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "common/coordinator_client.h"
#include "paci/v1/coordinator.grpc.pb.h"
#include "worker/runtime/stage_host.h"
#include "worker/transport/stage_link_service.h"

namespace paci {

struct WorkerAgentOptions {
  std::shared_ptr<const CoordinatorClient> coordinator;  // its WorkerGateway
  v1::WorkerRegistration registration;         // id, addresses, device, labels, pid
  absl::Duration heartbeat_interval = absl::Seconds(1);
  absl::Duration max_backoff = absl::Seconds(5);
  StageHostOptions host;
};

// A worker under a coordinator: keeps one WorkerGateway.Connect stream open
// (registering, then a heartbeat every heartbeat_interval), runs each stage it
// is assigned on its own thread through a StageHost, stops it when told, and
// sends the stage's reports up the stream. When the coordinator goes away it
// reconnects with backoff and registers again, naming the stage it still
// runs, so a restarted coordinator can reconcile instead of restarting jobs.
// A stage's final report is sent again at every registration until the
// coordinator assigns the next stage, which it does only once it has stored
// what that report changed: a coordinator killed between receiving the report
// and storing it learns it again instead of restarting the job.
//
// Owns its threads (the heartbeat of each session and the stage thread);
// Shutdown() stops them and Run() returns. Thread-safe.
class WorkerAgent final : public ReportSink {
 public:
  WorkerAgent(const WorkerAgentOptions& options, StageLinkService& links,
              prometheus::Registry& registry);
  ~WorkerAgent() override;

  // Serves until Shutdown(). Blocks.
  void Run();
  void Shutdown();

  void Deliver(const v1::StageReport& report) override;

 private:
  using Stream = grpc::ClientReaderWriter<v1::WorkerMessage, v1::CoordinatorMessage>;
  // One connection's life; returns when the stream ends.
  void Session();
  void StartStage(const v1::StageAssignment& assignment);
  void StopStage(const v1::StopStage& stop);
  bool WriteLocked(const v1::WorkerMessage& message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(write_mu_);

  const WorkerAgentOptions options_;
  StageLinkService& links_;
  prometheus::Registry& registry_;
  absl::Notification shutdown_;

  absl::Mutex write_mu_;
  Stream* stream_ ABSL_GUARDED_BY(write_mu_) = nullptr;
  grpc::ClientContext* context_ ABSL_GUARDED_BY(write_mu_) = nullptr;
  // The last stage's assignment, and its final report until the next stage
  // is assigned.
  v1::StageAssignment last_assigned_ ABSL_GUARDED_BY(write_mu_);
  std::optional<v1::StageReport> unconfirmed_final_ ABSL_GUARDED_BY(write_mu_);

  absl::Mutex stage_mu_;
  std::unique_ptr<StageHost> host_ ABSL_GUARDED_BY(stage_mu_);
  std::optional<v1::StageAssignment> running_ ABSL_GUARDED_BY(stage_mu_);
  std::thread stage_thread_;  // touched only with stage_mu_ held
};

}  // namespace paci
