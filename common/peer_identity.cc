#include "common/peer_identity.h"

#include <memory>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace paci {

PeerIdentity IdentityOfCommonName(absl::string_view common_name) {
  PeerIdentity peer;
  peer.common_name = std::string(common_name);
  if (common_name == kOperatorCommonName) {
    peer.kind = PeerIdentity::Kind::kOperator;
  } else if (absl::StartsWith(common_name, kWorkerCommonNamePrefix) &&
             common_name.size() > sizeof(kWorkerCommonNamePrefix) - 1) {
    peer.kind = PeerIdentity::Kind::kWorker;
    peer.name_space = std::string(common_name.substr(sizeof(kWorkerCommonNamePrefix) - 1));
  } else if (absl::StartsWith(common_name, kTenantCommonNamePrefix) &&
             common_name.size() > sizeof(kTenantCommonNamePrefix) - 1) {
    peer.kind = PeerIdentity::Kind::kTenant;
    peer.name_space = std::string(common_name.substr(sizeof(kTenantCommonNamePrefix) - 1));
  }
  return peer;
}

PeerIdentity IdentityOf(const grpc::ServerContext& context) {
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return {};
  const std::vector<grpc::string_ref> names = auth->FindPropertyValues("x509_common_name");
  if (names.empty()) return {};
  return IdentityOfCommonName(absl::string_view(names.front().data(), names.front().size()));
}

absl::Status CheckClientIdentity(const PeerIdentity& peer) {
  if (peer.kind != PeerIdentity::Kind::kWorker) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrCat(
      "the certificate \"", peer.common_name,
      "\" is a worker's: it may connect as a worker of namespace ", peer.name_space,
      ", not submit, list or cancel jobs"));
}

bool MaySeeJob(const PeerIdentity& peer, const std::map<std::string, std::string>& labels) {
  if (peer.kind != PeerIdentity::Kind::kTenant) return true;
  auto it = labels.find(kNamespaceLabel);
  return it != labels.end() && it->second == peer.name_space;
}

absl::Status LabelSubmission(const PeerIdentity& peer,
                             std::map<std::string, std::string>* labels) {
  if (peer.kind != PeerIdentity::Kind::kTenant) return absl::OkStatus();
  auto [it, added] = labels->emplace(kNamespaceLabel, peer.name_space);
  if (!added && it->second != peer.name_space) {
    return absl::PermissionDeniedError(absl::StrCat(
        "labels[", kNamespaceLabel, "]: \"", it->second, "\" is not your namespace: the certificate \"",
        peer.common_name, "\" submits jobs of namespace ", peer.name_space, " only"));
  }
  return absl::OkStatus();
}

absl::Status CheckWorkerIdentity(const PeerIdentity& peer, const std::string& worker_id,
                                     const std::string* job_label) {
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

}  // namespace paci
