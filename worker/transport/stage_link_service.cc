#include "worker/transport/stage_link_service.h"

#include <glog/logging.h>

#include "absl/strings/str_cat.h"

namespace paci {

StageLinkService::StageLinkService(Inbox& inbox) : inbox_(inbox) {}

StageLinkService::StageLinkService(const LinkExpectations& expect, Inbox& inbox)
    : expect_(expect), inbox_(inbox) {}

void StageLinkService::SetExpectations(const LinkExpectations& expect) {
  absl::MutexLock lock(&mu_);
  expect_ = expect;
}

std::optional<LinkExpectations> StageLinkService::Expectations() const {
  // A neighbour may connect a moment before this stage has its job.
  absl::MutexLock lock(&mu_);
  auto known = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return expect_.has_value(); };
  mu_.AwaitWithTimeout(absl::Condition(&known), absl::Seconds(30));
  return expect_;
}

grpc::Status StageLinkService::Push(grpc::ServerContext* context,
                                    grpc::ServerReader<v1::TensorFrame>* reader,
                                    v1::PushSummary* summary) {
  const std::optional<LinkExpectations> expect = Expectations();
  if (!expect) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "this stage has not joined its job yet");
  }
  const LinkExpectations& e = *expect;
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
    peer = frame.from_stage();
    saw_shutdown |= frame.kind() == v1::TensorFrame::SHUTDOWN;
    const Inbox::From from =
        peer == e.stage + 1 ? Inbox::From::kNext : Inbox::From::kPrevious;
    summary->set_frames_received(summary->frames_received() + 1);
    if (!inbox_.Push(from, std::move(frame))) break;  // the stage is finished
    frame = v1::TensorFrame();
  }
  if (peer >= 0 && !saw_shutdown && !inbox_.closed()) {
    // An orderly end comes only after SHUTDOWN or once this stage has
    // finished (it closes its inbox before it passes SHUTDOWN on).
    inbox_.Fail(absl::UnavailableError(absl::StrCat(
        "stage ", peer, " closed its link to stage ", e.stage,
        context->IsCancelled() ? " abruptly (the process died or the connection broke)"
                               : " before training ended")));
  }
  return grpc::Status::OK;
}

}  // namespace paci
