#include "worker/transport/stage_link_service.h"

#include <glog/logging.h>
#include <grpc/grpc_security_constants.h>
#include <openssl/crypto.h>

#include "absl/strings/str_cat.h"
#include "common/run_id.h"

namespace paci {
namespace {

// Whether the verified certificate of the call's peer carries the DNS name
// `name` (a subjectAltName; gRPC lists them in the auth context).
bool CertificateNames(const grpc::ServerContext& context, const std::string& name) {
  const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return false;
  for (const char* property : {GRPC_X509_SAN_PROPERTY_NAME, GRPC_PEER_DNS_PROPERTY_NAME}) {
    for (const grpc::string_ref& value : auth->FindPropertyValues(property)) {
      if (std::string(value.data(), value.size()) == name) return true;
    }
  }
  return false;
}

}  // namespace

void StageLinkService::Attach(const LinkExpectations& expect, std::shared_ptr<Inbox> inbox) {
  absl::MutexLock lock(&mu_);
  attached_ = Attached{expect, std::move(inbox), std::make_shared<Senders>()};
}

void StageLinkService::Detach() {
  absl::MutexLock lock(&mu_);
  attached_.reset();
}

std::optional<StageLinkService::Attached> StageLinkService::AwaitAttached(const std::string& run,
                                                                         bool* crowded) const {
  absl::MutexLock lock(&mu_);
  // A stage is attached, and not one this worker is still ending while the
  // stream's own stage (of a later attempt or another job) is on its way.
  auto ready = [this, &run]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return attached_.has_value() && !MayBeNextRun(run, attached_->expect.job_name);
  };
  if (ready()) return attached_;
  if (waiting_ >= kMaxWaitingStreams) {
    *crowded = true;
    return std::nullopt;
  }
  if (attached_) {
    LOG(INFO) << "stage link: a stream of " << run << " waits while this worker's stage of "
              << attached_->expect.job_name << " ends";
  }
  ++waiting_;
  mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Seconds(30));
  --waiting_;
  return attached_;
}

grpc::Status StageLinkService::Push(grpc::ServerContext* context,
                                    grpc::ServerReader<v1::TensorFrame>* reader,
                                    v1::PushSummary* summary) {
  if (!peer_name_.empty() && !CertificateNames(*context, peer_name_)) {
    frames_rejected_.fetch_add(1);
    LOG(WARNING) << "stage link: refused " << context->peer() << ", whose certificate does not name "
                 << peer_name_;
    return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                        absl::StrCat("stage link: the sender's certificate does not name ",
                                     peer_name_, ", which every worker of this job carries"));
  }
  const auto& metadata = context->client_metadata();
  const auto claimed_run = metadata.find(kLinkRunMetadata);
  const std::string run = claimed_run == metadata.end()
                              ? ""
                              : std::string(claimed_run->second.data(), claimed_run->second.size());
  bool crowded = false;
  const std::optional<Attached> attached = AwaitAttached(run, &crowded);
  if (crowded) {
    LOG(WARNING) << "stage link: refused " << context->peer() << ": this worker runs no stage and "
                 << kMaxWaitingStreams << " streams already wait for one";
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        absl::StrCat("this worker runs no stage yet and ", kMaxWaitingStreams,
                                     " streams already wait for one"));
  }
  if (!attached) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "this worker runs no stage");
  }
  const LinkExpectations& e = attached->expect;
  if (!e.secret.empty()) {
    // Before any frame: a stranger reaches neither the inbox nor the job.
    const auto given = metadata.find(kLinkSecretMetadata);
    const bool matches = given != metadata.end() && given->second.size() == e.secret.size() &&
                         CRYPTO_memcmp(given->second.data(), e.secret.data(), e.secret.size()) == 0;
    if (!matches) {
      frames_rejected_.fetch_add(1);
      LOG(WARNING) << "stage link of " << e.job_name << " stage " << e.stage << ": refused "
                   << context->peer() << ", which is not a peer of this attempt ("
                   << (given == metadata.end() ? "no" : "a wrong") << " link secret)";
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "stage link: not a peer of this attempt (no or a wrong link secret)");
    }
  }
  // Accepted: the sender waits for this before it writes, so a refusal above
  // fails its link at once instead of after the frames it could buffer.
  context->AddInitialMetadata(kLinkAcceptedMetadata, "1");
  reader->SendInitialMetadata();
  Inbox& inbox = *attached->inbox;
  v1::TensorFrame frame;
  int peer = -1;
  bool saw_shutdown = false;
  while (reader->Read(&frame)) {
    absl::Status valid = ValidateFrame(frame, e);
    if (!valid.ok()) {
      frames_rejected_.fetch_add(1);
      LOG(WARNING) << valid.message() << " (peer " << context->peer() << ")";
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, std::string(valid.message()));
    }
    if (peer < 0) {
      // The first frame names the sender: one stream per neighbour.
      absl::MutexLock lock(&attached->senders->mu);
      if (!attached->senders->stages.insert(frame.from_stage()).second) {
        frames_rejected_.fetch_add(1);
        LOG(WARNING) << "stage link of " << e.job_name << " stage " << e.stage << ": refused "
                     << context->peer() << ": a second stream from stage " << frame.from_stage();
        return grpc::Status(grpc::StatusCode::ALREADY_EXISTS,
                            absl::StrCat("stage link: stage ", frame.from_stage(),
                                         " already has its stream to stage ", e.stage,
                                         " in this attempt"));
      }
    }
    peer = frame.from_stage();
    saw_shutdown |= frame.kind() == v1::TensorFrame::SHUTDOWN;
    const Inbox::From from = peer == e.stage + 1 ? Inbox::From::kNext : Inbox::From::kPrevious;
    summary->set_frames_received(summary->frames_received() + 1);
    if (!inbox.Push(from, std::move(frame))) break;  // the stage is finished
    frame = v1::TensorFrame();
  }
  if (peer >= 0 && !saw_shutdown && !inbox.closed()) {
    // An orderly end comes only after SHUTDOWN or once this stage has
    // finished (it closes its inbox before it passes SHUTDOWN on).
    inbox.Fail(absl::UnavailableError(absl::StrCat(
        "stage ", peer, " closed its link to stage ", e.stage,
        context->IsCancelled() ? " abruptly (the process died or the connection broke)"
                               : " before training ended")));
  }
  return grpc::Status::OK;
}

}  // namespace paci
