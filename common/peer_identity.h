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
// workers by) names a job of that namespace; it is placed only on the jobs of
// that namespace (those whose kNamespaceLabel names it), whatever their
// selector; and it may not use the Coordinator service (submit, list,
// cancel). A tenant sees, watches, changes and cancels only the jobs whose
// kNamespaceLabel names its namespace, and the jobs it submits carry that
// label (the operator labels each job it submits with its TrainingJob's
// namespace); it selects no other namespace's workers, runs its jobs at a
// priority of at most --tenant_max_priority, and registers no worker.
//
// Any other common name is an administrator's, unrestricted, only when the
// coordinator is told so (--admin_identities); else, and for a name under
// "system:paci:" that is none of the three above (such as
// "system:paci:worker:" without a namespace), the caller is refused. A caller
// without a certificate (no mutual TLS: the loopback default) is unnamed,
// unrestricted.

#include <map>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace grpc {
class ServerContext;
}  // namespace grpc

namespace paci {

// The label a worker pod's worker registers with and its TrainingJob's
// coordinator job selects: "<namespace>.<name>" of the TrainingJob.
inline constexpr char kWorkerJobLabel[] = "paci.dev/job";

// The label naming the namespace a coordinator job belongs to. The
// coordinator also matches it, as a label of each worker that it sets itself
// (WorkerNamespace), against the job's: a job runs on the workers of its own
// namespace only, and a job of none on the workers of none.
inline constexpr char kNamespaceLabel[] = "paci.dev/namespace";

// The names paci gives; every common name under kReservedCommonNamePrefix is
// one of these or refused.
inline constexpr char kReservedCommonNamePrefix[] = "system:paci:";
inline constexpr char kOperatorCommonName[] = "system:paci:operator";
inline constexpr char kWorkerCommonNamePrefix[] = "system:paci:worker:";
inline constexpr char kTenantCommonNamePrefix[] = "system:paci:tenant:";

// The common names of the administrators' certificates (--admin_identities).
using AdministratorNames = std::set<std::string>;

struct PeerIdentity {
  enum class Kind {
    kUnnamed,        // no client certificate (no mutual TLS): unrestricted
    kAdministrator,  // a certificate whose common name --admin_identities lists
    kOperator,
    kWorker,
    kTenant,
    kUnknown,  // a certificate of any other name: refused everything
  };
  Kind kind = Kind::kUnnamed;
  std::string name_space;   // kWorker, kTenant: the namespace it is bound to
  std::string common_name;  // as the certificate has it; empty without one
};

// --admin_identities: common names separated by commas (spaces around them
// and empty entries are ignored). InvalidArgument naming the flag for a name
// under kReservedCommonNamePrefix, which is never an administrator's.
absl::StatusOr<AdministratorNames> ParseAdministratorNames(absl::string_view flag);

// The identity a certificate of that common name gives: kUnknown for a name
// that is neither paci's (a namespace must be a DNS label: lower-case letters,
// digits and '-', at most 63) nor one of `administrators`.
PeerIdentity IdentityOfCommonName(absl::string_view common_name,
                                  const AdministratorNames& administrators = {});

// The identity of the peer of a call: its verified client certificate's
// common name (gRPC's auth context), unnamed without a certificate.
PeerIdentity IdentityOf(const grpc::ServerContext& context,
                        const AdministratorNames& administrators);

// The common name of the call's verified client certificate; empty without.
std::string CommonNameOf(const grpc::ServerContext& context);

// PermissionDenied, naming the identity, when a worker-bound identity calls
// what only clients may (the Coordinator service), or the certificate is no
// one's paci knows (kUnknown).
absl::Status CheckClientIdentity(const PeerIdentity& peer);

// Whether `peer` may see a job of these labels: every known caller but a
// tenant, and a tenant the jobs whose kNamespaceLabel is its namespace.
bool MaySeeJob(const PeerIdentity& peer, const std::map<std::string, std::string>& labels);

// The labels a job submitted by `peer` is stored with: a tenant's get its
// namespace as kNamespaceLabel, PermissionDenied when they name another one.
absl::Status LabelSubmission(const PeerIdentity& peer, std::map<std::string, std::string>* labels);

// The namespace a job of these labels belongs to: its kNamespaceLabel, ""
// for none. `Labels`: a std::map or a job's proto labels.
template <typename Labels>
std::string NamespaceOfLabels(const Labels& labels) {
  const auto it = labels.find(kNamespaceLabel);
  return it == labels.end() ? std::string() : std::string(it->second);
}

// Checks a submitted job's run_policy.worker_selector against the namespace
// the job belongs to (`job_namespace`, its kNamespaceLabel as stored): a
// kNamespaceLabel in it must be that namespace (the coordinator places a job
// on its own namespace's workers only: PermissionDenied for a tenant,
// InvalidArgument for others); and a tenant's may not name another
// namespace's job in kWorkerJobLabel ("<namespace>.<name>"): PermissionDenied
// naming the field.
absl::Status CheckWorkerSelector(const PeerIdentity& peer,
                                 const std::map<std::string, std::string>& selector,
                                 const std::string& job_namespace);

// PermissionDenied naming the field when `peer` may not submit a job of that
// name: a name of the form the operator gives TrainingJobs' jobs
// (IsOperatorJobName, common/operator_job_name.h) is the operator's, and
// administrators' and the unnamed's; a tenant could otherwise take the name of
// a TrainingJob's next job before the operator submits it.
absl::Status CheckJobNameOwner(const PeerIdentity& peer, const std::string& name);

// PermissionDenied naming run_policy.priority and the limit when a tenant asks
// for a priority above `tenant_max_priority` (--tenant_max_priority); the
// operator and administrators may set any.
absl::Status CheckPriority(const PeerIdentity& peer, int priority, int tenant_max_priority);

// PermissionDenied, naming the field, when `worker_id` or `job_label` (the
// worker's kWorkerJobLabel; null when it has none) lies outside a worker
// identity's namespace: a bound worker must have the label. OK for the
// unnamed and administrators; the operator's and tenants' certificates, and
// unknown ones, register no worker.
absl::Status CheckWorkerIdentity(const PeerIdentity& peer, const std::string& worker_id,
                                 const std::string* job_label);

// The namespace of the jobs a worker so identified is placed on (matched
// against each job's kNamespaceLabel): a bound worker's, its certificate's;
// an administrator's, none (""); one without a certificate (a coordinator
// without mutual TLS, which knows no one's namespace), the namespace its
// kWorkerJobLabel names ("<namespace>.<name>", as the operator's worker pods
// register), else none.
std::string WorkerNamespace(const PeerIdentity& peer, const std::string* job_label);

}  // namespace paci
