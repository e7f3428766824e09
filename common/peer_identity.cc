#include "common/peer_identity.h"

#include <memory>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/dns_label.h"
#include "common/operator_job_name.h"

namespace paci {
namespace {

// The namespace after `prefix` in `common_name`; empty when it does not start
// so or what follows is no namespace's name.
std::string NamespaceAfter(absl::string_view common_name, absl::string_view prefix) {
  if (!absl::StartsWith(common_name, prefix)) return "";
  absl::string_view rest = common_name.substr(prefix.size());
  return IsDnsLabel(std::string_view(rest.data(), rest.size())) ? std::string(rest) : "";
}

std::string PaciNames() {
  return absl::StrCat(kOperatorCommonName, ", ", kWorkerCommonNamePrefix, "<namespace>, ",
                      kTenantCommonNamePrefix, "<namespace>");
}

// What a certificate of no identity paci knows (kUnknown) is told.
absl::Status RefusedCertificate(const PeerIdentity& peer) {
  if (absl::StartsWith(peer.common_name, kReservedCommonNamePrefix)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the certificate \"", peer.common_name, "\" names no identity of paci: a common name under ",
        kReservedCommonNamePrefix, " must be one of ", PaciNames(),
        " (a namespace of lower-case letters, digits and '-')"));
  }
  return absl::PermissionDeniedError(absl::StrCat(
      peer.common_name.empty() ? std::string("a certificate without a common name")
                               : absl::StrCat("the certificate \"", peer.common_name, "\""),
      " is not an administrator's: a common name other than paci's own (", PaciNames(),
      ") is an administrator's only when the coordinator's --admin_identities lists it"));
}

std::string OwnWorkersOnly(const std::string& job_namespace) {
  return absl::StrCat("a job of namespace ", job_namespace,
                      " runs on its own namespace's workers only");
}

}  // namespace

absl::StatusOr<AdministratorNames> ParseAdministratorNames(absl::string_view flag) {
  AdministratorNames names;
  for (absl::string_view part : absl::StrSplit(flag, ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (part.empty()) continue;
    if (absl::StartsWith(part, kReservedCommonNamePrefix)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--admin_identities: \"", part, "\" is under ", kReservedCommonNamePrefix,
          ", the names paci gives its operator, workers and tenants (", PaciNames(),
          "); an administrator's certificate needs another common name"));
    }
    names.insert(std::string(part));
  }
  return names;
}

PeerIdentity IdentityOfCommonName(absl::string_view common_name,
                                  const AdministratorNames& administrators) {
  PeerIdentity peer;
  peer.common_name = std::string(common_name);
  peer.kind = PeerIdentity::Kind::kUnknown;
  const std::string worker_namespace = NamespaceAfter(common_name, kWorkerCommonNamePrefix);
  const std::string tenant_namespace = NamespaceAfter(common_name, kTenantCommonNamePrefix);
  if (common_name == kOperatorCommonName) {
    peer.kind = PeerIdentity::Kind::kOperator;
  } else if (!worker_namespace.empty()) {
    peer.kind = PeerIdentity::Kind::kWorker;
    peer.name_space = worker_namespace;
  } else if (!tenant_namespace.empty()) {
    peer.kind = PeerIdentity::Kind::kTenant;
    peer.name_space = tenant_namespace;
  } else if (!common_name.empty() && !absl::StartsWith(common_name, kReservedCommonNamePrefix) &&
             administrators.count(peer.common_name) > 0) {
    peer.kind = PeerIdentity::Kind::kAdministrator;
  }
  return peer;
}

std::string CommonNameOf(const grpc::ServerContext& context) {
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return "";
  const std::vector<grpc::string_ref> names = auth->FindPropertyValues("x509_common_name");
  if (names.empty()) return "";
  return std::string(names.front().data(), names.front().size());
}

PeerIdentity IdentityOf(const grpc::ServerContext& context,
                        const AdministratorNames& administrators) {
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  // No certificate: no mutual TLS (the loopback default, or --insecure).
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return {};
  // A verified certificate is someone's: one without a common name is no one's paci knows.
  return IdentityOfCommonName(CommonNameOf(context), administrators);
}

absl::Status CheckClientIdentity(const PeerIdentity& peer) {
  if (peer.kind == PeerIdentity::Kind::kUnknown) return RefusedCertificate(peer);
  if (peer.kind != PeerIdentity::Kind::kWorker) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      "the certificate \"", peer.common_name,
      "\" is a worker's: it may connect as a worker of namespace ", peer.name_space,
      ", not submit, list or cancel jobs"));
}

bool MaySeeJob(const PeerIdentity& peer, const std::map<std::string, std::string>& labels) {
  if (peer.kind == PeerIdentity::Kind::kUnknown) return false;
  if (peer.kind != PeerIdentity::Kind::kTenant) return true;
  auto it = labels.find(kNamespaceLabel);
  return it != labels.end() && it->second == peer.name_space;
}

absl::Status LabelSubmission(const PeerIdentity& peer,
                             std::map<std::string, std::string>* labels) {
  if (peer.kind == PeerIdentity::Kind::kUnknown) return RefusedCertificate(peer);
  if (peer.kind != PeerIdentity::Kind::kTenant) return absl::OkStatus();
  auto [it, added] = labels->emplace(kNamespaceLabel, peer.name_space);
  if (!added && it->second != peer.name_space) {
    return absl::PermissionDeniedError(absl::StrCat(
        "labels[", kNamespaceLabel, "]: \"", it->second, "\" is not your namespace: the certificate \"",
        peer.common_name, "\" submits jobs of namespace ", peer.name_space, " only"));
  }
  return absl::OkStatus();
}

absl::Status CheckWorkerSelector(const PeerIdentity& peer,
                                 const std::map<std::string, std::string>& selector,
                                 const std::string& job_namespace) {
  const bool tenant = peer.kind == PeerIdentity::Kind::kTenant;
  if (auto it = selector.find(kNamespaceLabel);
      it != selector.end() && it->second != job_namespace) {
    const std::string named = absl::StrCat("run_policy.worker_selector: ", kNamespaceLabel, "=",
                                           it->second, " names namespace ", it->second);
    if (tenant) {
      return absl::PermissionDeniedError(absl::StrCat(named, "; ", OwnWorkersOnly(job_namespace)));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        named, ", and the job is of ",
        job_namespace.empty() ? std::string("none")
                              : absl::StrCat("namespace ", job_namespace),
        " (labels[", kNamespaceLabel, "]): a job runs on the workers of its own namespace only; "
        "label the job with the namespace instead"));
  }
  if (!tenant) return absl::OkStatus();
  if (auto it = selector.find(kWorkerJobLabel); it != selector.end()) {
    const std::string& value = it->second;
    if (!absl::StartsWith(value, job_namespace + ".")) {
      const size_t dot = value.find('.');
      return absl::PermissionDeniedError(absl::StrCat(
          "run_policy.worker_selector: ", kWorkerJobLabel, "=", value,
          dot == std::string::npos
              ? absl::StrCat(" names no namespace (a job \"", job_namespace, ".<name>\")")
              : absl::StrCat(" names namespace ", value.substr(0, dot)),
          "; ", OwnWorkersOnly(job_namespace)));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckJobNameOwner(const PeerIdentity& peer, const std::string& name) {
  switch (peer.kind) {
    case PeerIdentity::Kind::kOperator:
    case PeerIdentity::Kind::kAdministrator:
    case PeerIdentity::Kind::kUnnamed:
      return absl::OkStatus();
    default:
      break;
  }
  if (!IsOperatorJobName(name)) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      "name: \"", name, "\" has the form of the names the operator gives TrainingJobs' jobs (",
      kOperatorJobNameForm, "); choose another"));
}

absl::Status CheckPriority(const PeerIdentity& peer, int priority, int tenant_max_priority) {
  if (peer.kind != PeerIdentity::Kind::kTenant || priority <= tenant_max_priority) {
    return absl::OkStatus();
  }
  return absl::PermissionDeniedError(absl::StrCat(
      "run_policy.priority: ", priority, " is above ", tenant_max_priority,
      ", the highest a tenant's job may have (the coordinator's --tenant_max_priority): the "
      "certificate \"", peer.common_name, "\" is a tenant's of namespace ", peer.name_space,
      "; only the operator and administrators may set more"));
}

absl::Status CheckWorkerIdentity(const PeerIdentity& peer, const std::string& worker_id,
                                 const std::string* job_label) {
  if (peer.kind == PeerIdentity::Kind::kUnknown) return RefusedCertificate(peer);
  if (peer.kind == PeerIdentity::Kind::kOperator || peer.kind == PeerIdentity::Kind::kTenant) {
    return absl::PermissionDeniedError(absl::StrCat(
        "the certificate \"", peer.common_name, "\" is ",
        peer.kind == PeerIdentity::Kind::kOperator ? "the operator's"
                                                   : absl::StrCat("a tenant's of namespace ", peer.name_space),
        ": it registers no worker"));
  }
  if (peer.kind != PeerIdentity::Kind::kWorker) return absl::OkStatus();
  const std::string prefix = peer.name_space + ".";
  const std::string bound = absl::StrCat("the certificate \"", peer.common_name,
                                         "\" binds this worker to namespace ", peer.name_space);
  if (!absl::StartsWith(worker_id, prefix)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "register.worker_id: \"", worker_id, "\" is not in namespace ", peer.name_space, ": ",
        bound, " (ids \"", prefix, "<pod>\")"));
  }
  if (job_label == nullptr || !absl::StartsWith(*job_label, prefix)) {
    return absl::PermissionDeniedError(absl::StrCat(
        "register.labels[", kWorkerJobLabel, "]: ",
        job_label == nullptr ? std::string("missing") : absl::StrCat("\"", *job_label, "\""),
        ": ", bound, " (a job \"", prefix, "<name>\")"));
  }
  return absl::OkStatus();
}

std::string WorkerNamespace(const PeerIdentity& peer, const std::string* job_label) {
  switch (peer.kind) {
    case PeerIdentity::Kind::kWorker:
      return peer.name_space;
    case PeerIdentity::Kind::kUnnamed:
      if (job_label != nullptr) {
        const size_t dot = job_label->find('.');
        if (dot != std::string::npos) return job_label->substr(0, dot);
      }
      return "";
    default:
      return "";
  }
}

}  // namespace paci
