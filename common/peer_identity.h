#pragma once

// Who calls the coordinator, as the common name of its client certificate
// says (mutual TLS). The certificates that helm/paci and scripts/deploy-tls.sh
// make name their holder so:
//
//   system:paci:operator              the operator
//   system:paci:worker:<namespace>    the workers of TrainingJobs in <namespace>
//   system:paci:tenant:<namespace>    a user of <namespace> (pacictl, a client)
//
// A worker so named registers only under its namespace: its id starts with
// "<namespace>." and its kWorkerJobLabel (which the operator's jobs select
// workers by) names a job of that namespace, so it is never placed on another
// tenant's stages; and it may not use the Coordinator service (submit, list,
// cancel). A tenant sees, watches, changes and cancels only the jobs whose
// kNamespaceLabel names its namespace, and the jobs it submits carry that
// label (the operator labels each job it submits with its TrainingJob's
// namespace); it registers no worker. A caller without a certificate, or with
// one of another name, is unnamed: the loopback default and an
// administrator's hand-made certificates, unrestricted.

#include <map>
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

// The label naming the namespace a coordinator job belongs to.
inline constexpr char kNamespaceLabel[] = "paci.dev/namespace";

inline constexpr char kOperatorCommonName[] = "system:paci:operator";
inline constexpr char kWorkerCommonNamePrefix[] = "system:paci:worker:";
inline constexpr char kTenantCommonNamePrefix[] = "system:paci:tenant:";

struct PeerIdentity {
  enum class Kind { kUnnamed, kOperator, kWorker, kTenant };
  Kind kind = Kind::kUnnamed;
  std::string name_space;   // kWorker, kTenant: the namespace it is bound to
  std::string common_name;  // as the certificate has it; empty without one
};

PeerIdentity IdentityOfCommonName(absl::string_view common_name);

// The identity of the peer of a call: its verified client certificate's
// common name (gRPC's auth context), unnamed without one.
PeerIdentity IdentityOf(const grpc::ServerContext& context);

// PermissionDenied, naming the identity, when a worker-bound identity calls
// what only clients may (the Coordinator service).
absl::Status CheckClientIdentity(const PeerIdentity& peer);

// Whether `peer` may see a job of these labels: every caller but a tenant,
// and a tenant the jobs whose kNamespaceLabel is its namespace.
bool MaySeeJob(const PeerIdentity& peer, const std::map<std::string, std::string>& labels);

// The labels a job submitted by `peer` is stored with: a tenant's get its
// namespace as kNamespaceLabel, PermissionDenied when they name another one.
absl::Status LabelSubmission(const PeerIdentity& peer, std::map<std::string, std::string>* labels);

// PermissionDenied, naming the field, when `worker_id` or `job_label` (the
// worker's kWorkerJobLabel; null when it has none) lies outside a worker
// identity's namespace: a bound worker must have the label. OK for the
// unnamed; the operator's and tenants' certificates register no worker.
absl::Status CheckWorkerIdentity(const PeerIdentity& peer, const std::string& worker_id,
                                 const std::string* job_label);

}  // namespace paci
