#pragma once

// Who calls the coordinator, as the common name of its client certificate
// says (mutual TLS). The certificates that helm/paci and scripts/deploy-tls.sh
// make name their holder so:
//
//   system:paci:operator              the operator
//   system:paci:worker:<namespace>    the workers of TrainingJobs in <namespace>
//
// A worker so named registers only under its namespace: its id starts with
// "<namespace>." and its kWorkerJobLabel (which the operator's jobs select
// workers by) names a job of that namespace, so it is never placed on another
// tenant's stages; and it may not use the Coordinator service (submit, list,
// cancel). A caller without a certificate, or with one of another name, is
// unnamed: the loopback default and hand-made certificates, unrestricted.

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace grpc {
class ServerContext;
}  // namespace grpc

namespace paci {

// The label a worker pod's worker registers with and its TrainingJob's
// coordinator job selects: "<namespace>.<name>" of the TrainingJob.
inline constexpr char kWorkerJobLabel[] = "paci.dev/job";

inline constexpr char kOperatorCommonName[] = "system:paci:operator";
inline constexpr char kWorkerCommonNamePrefix[] = "system:paci:worker:";

struct PeerIdentity {
  enum class Kind { kUnnamed, kOperator, kWorker };
  Kind kind = Kind::kUnnamed;
  std::string name_space;   // kWorker: the namespace it is bound to
  std::string common_name;  // as the certificate has it; empty without one
};

PeerIdentity IdentityOfCommonName(absl::string_view common_name);

// The identity of the peer of a call: its verified client certificate's
// common name (gRPC's auth context), unnamed without one.
PeerIdentity IdentityOf(const grpc::ServerContext& context);

// PermissionDenied, naming the identity, when a worker-bound identity calls
// what only clients may (the Coordinator service).
absl::Status CheckClientIdentity(const PeerIdentity& peer);

// PermissionDenied, naming the field, when `worker_id` or `job_label` (the
// worker's kWorkerJobLabel; null when it has none) lies outside a worker
// identity's namespace: a bound worker must have the label. OK for the
// unnamed; the operator's certificate registers no worker.
absl::Status CheckWorkerIdentity(const PeerIdentity& peer, const std::string& worker_id,
                                 const std::string* job_label);

}  // namespace paci
