#include "worker/transport/stage_link_service.h"

#include <glog/logging.h>

#include "absl/strings/str_cat.h"

namespace paci {

StageLinkService::StageLinkService(const LinkExpectations& expect, Inbox& inbox)
    : expect_(expect), inbox_(inbox) {}

grpc::Status StageLinkService::Push(grpc::ServerContext* context,
                                    grpc::ServerReader<v1::TensorFrame>* reader,
                                    v1::PushSummary* summary) {
  v1::TensorFrame frame;
  int peer = -1;
  bool saw_shutdown = false;
  while (reader->Read(&frame)) {
    absl::Status valid = ValidateFrame(frame, expect_);
    if (!valid.ok()) {
      frames_rejected_.fetch_add(1);
      LOG(WARNING) << valid.message() << " (peer " << context->peer() << ")";
      return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, std::string(valid.message()));
    }
    peer = frame.from_stage();
    saw_shutdown |= frame.kind() == v1::TensorFrame::SHUTDOWN;
    const Inbox::From from =
        peer == expect_.stage + 1 ? Inbox::From::kNext : Inbox::From::kPrevious;
    summary->set_frames_received(summary->frames_received() + 1);
    if (!inbox_.Push(from, std::move(frame))) break;  // the stage is finished
    frame = v1::TensorFrame();
  }
  if (peer >= 0 && !saw_shutdown && !inbox_.closed()) {
    // An orderly end comes only after SHUTDOWN or once this stage has
    // finished (it closes its inbox before it passes SHUTDOWN on).
    inbox_.Fail(absl::UnavailableError(absl::StrCat(
        "stage ", peer, " closed its link to stage ", expect_.stage,
        context->IsCancelled() ? " abruptly (the process died or the connection broke)"
                               : " before training ended")));
  }
  return grpc::Status::OK;
}

}  // namespace paci
