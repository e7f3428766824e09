#pragma once

#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "common/peer_identity.h"
#include "paci/v1/coordinator.grpc.pb.h"
#include "server/job_manager.h"

namespace paci {

// The worker streams open per namespace of the workers' certificates
// (system:paci:worker:<namespace>): each holds two threads of the coordinator
// (the handler and its writer), so one namespace holds at most
// `max_per_namespace` (--max_workers_per_namespace). A slot is taken for the
// life of a stream. Streams of callers without a certificate (no mutual TLS:
// the coordinator knows no one's namespace) and of administrators are not
// counted. Thread-safe.
class WorkerStreamSlots {
 public:
  explicit WorkerStreamSlots(int max_per_namespace) : max_per_namespace_(max_per_namespace) {}
  // ResourceExhausted naming the namespace and the flag when `peer` is a
  // worker whose namespace has max_per_namespace streams open; else OK, the
  // slot taken (when counted).
  absl::Status Take(const PeerIdentity& peer) ABSL_LOCKS_EXCLUDED(mutex_);
  // Gives back the slot Take took for `peer`.
  void Give(const PeerIdentity& peer) ABSL_LOCKS_EXCLUDED(mutex_);
  // The streams open of that namespace's workers.
  int Open(const std::string& name_space) const ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  const int max_per_namespace_;
  mutable absl::Mutex mutex_;
  std::map<std::string, int> open_ ABSL_GUARDED_BY(mutex_);  // never 0: erased instead
};

// The gRPC adapter of the worker side: one bidirectional stream per worker.
// The first message must register the worker; then heartbeats and reports
// flow up, assignments and stops flow down (written by a writer thread the
// handler owns, so the JobManager only ever enqueues). The stream's end is
// the worker's disconnection. Who the worker is (its certificate,
// common/peer_identity.h) bounds where it registers and the namespace whose
// jobs it is placed on, and the streams it may hold open (WorkerStreamSlots).
// Thread-safe.
class WorkerGateway final : public v1::WorkerGateway::Service {
 public:
  // `administrators`: the common names --admin_identities lists;
  // `max_workers_per_namespace`: --max_workers_per_namespace.
  WorkerGateway(JobManager& manager, std::string token,
                AdministratorNames administrators = {}, int max_workers_per_namespace = 1000);

  grpc::Status Connect(
      grpc::ServerContext* context,
      grpc::ServerReaderWriter<v1::CoordinatorMessage, v1::WorkerMessage>* stream) override;

 private:
  JobManager& manager_;
  const std::string token_;
  const AdministratorNames administrators_;
  WorkerStreamSlots streams_;
};

}  // namespace paci
