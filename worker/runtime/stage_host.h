#pragma once

#include <atomic>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>
#include <prometheus/registry.h>

#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "paci/v1/coordinator.pb.h"
#include "paci/v1/stage.pb.h"
#include "worker/transport/stage_link_service.h"

namespace paci {

class Inbox;
class PeerSender;
class StageRuntime;

// Where a running stage's reports go: the coordinator's stream, or nowhere
// for a worker started by hand.
class ReportSink {
 public:
  virtual ~ReportSink() = default;
  // Delivers one report. Must not block for long.
  virtual void Deliver(const v1::StageReport& report) = 0;
};

class ReplicaStoreServer;  // worker/runtime/replica_group.h

struct StageHostOptions {
  absl::Duration report_interval = absl::Milliseconds(500);
  // Credentials for the links to the neighbours (TLS); null: plaintext.
  std::shared_ptr<grpc::ChannelCredentials> link_credentials;
  // With link_credentials: the name every peer's certificate carries
  // (PeerSender::Options::tls_server_name); empty: its address.
  std::string link_tls_server_name;
  // What this worker's link server takes (--max_link_message_bytes): a job
  // whose frames are larger (LargestLinkMessageBytes) fails here, naming it.
  int64_t max_link_message_bytes = int64_t{1} << 30;
  // pipeline.data_parallel > 1: the host this worker's Gloo sockets listen on
  // (the one the other workers reach it at), and how long the replicas of a
  // stage have to meet before the stage fails.
  std::string replica_hostname = "127.0.0.1";
  absl::Duration replica_join_timeout = absl::Seconds(120);
  // How long one all-reduce waits for the slowest replica (replica 0 may be
  // evaluating or writing a checkpoint meanwhile).
  absl::Duration replica_timeout = absl::Minutes(5);
  // This worker's rendezvous store, served (ReplicaStoreServer::Serve) once it
  // runs replica 0 of a stage with replicas; null: none (by hand).
  ReplicaStoreServer* replica_store = nullptr;
};

// Runs one assigned stage from start to end: loads the corpus (first and last
// stage) and checks the vocabulary, meets the stage's other replicas (when
// pipeline.data_parallel > 1), attaches the stage to the worker's link
// service under the run id "<job>/<attempt>", opens the links to its
// neighbours, builds the StageRuntime (resuming from a checkpoint when the
// spec says so), trains, and reports progress every report_interval plus a
// final report (finished, or the error and its code) to the sink.
//
// Run() blocks on the calling thread, which it also uses as the reporting
// thread's owner; Cancel() may be called from any thread.
class StageHost {
 public:
  StageHost(const v1::StageAssignment& assignment, StageLinkService& links,
            prometheus::Registry& registry, ReportSink* sink, const StageHostOptions& options);
  ~StageHost();

  absl::Status Run();
  void Cancel();

 private:
  // Run() less the detach: checks, corpus, links, runtime, reports.
  absl::Status Train();
  // A stage that fails before its runtime reports: the error and its code
  // to the sink. Returns `status`.
  absl::Status Fail(const absl::Status& status);
  // The started link to stage `peer`, whose failure fails `inbox`; null when
  // there is no such stage.
  std::unique_ptr<PeerSender> OpenLink(int peer, const std::shared_ptr<Inbox>& inbox) const;
  // Init, then Run, with a report to the sink every report_interval;
  // Cancel() reaches the runtime meanwhile.
  absl::Status RunReporting(StageRuntime& runtime);
  // The runtime's report so far, of this attempt.
  v1::StageReport Report(StageRuntime& runtime) const;

  const v1::StageAssignment assignment_;
  StageLinkService& links_;
  prometheus::Registry& registry_;
  ReportSink* sink_;
  const StageHostOptions options_;
  std::atomic<bool> cancelled_{false};
  absl::Mutex mu_;
  StageRuntime* runtime_ ABSL_GUARDED_BY(mu_) = nullptr;  // while Train() runs
};

}  // namespace paci
