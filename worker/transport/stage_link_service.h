#pragma once

#include <atomic>
#include <cstdint>

#include "paci/v1/stage.grpc.pb.h"
#include "worker/transport/frame_validator.h"
#include "worker/transport/inbox.h"

namespace paci {

// The gRPC adapter of a stage's incoming links: each neighbour keeps one
// client stream open; every frame is validated (ValidateFrame) before it is
// queued in the Inbox. A frame that fails validation ends that stream with
// INVALID_ARGUMENT and is never queued. A neighbour's stream that ends before
// the stage is finished (the peer died or gave up) fails the Inbox with
// UNAVAILABLE naming the stage.
//
// Thread-safe; the Inbox must outlive the server that serves this service.
class StageLinkService final : public v1::StageLink::Service {
 public:
  StageLinkService(const LinkExpectations& expect, Inbox& inbox);

  grpc::Status Push(grpc::ServerContext* context, grpc::ServerReader<v1::TensorFrame>* reader,
                    v1::PushSummary* summary) override;

  int64_t frames_rejected() const { return frames_rejected_.load(); }

 private:
  const LinkExpectations expect_;
  Inbox& inbox_;
  std::atomic<int64_t> frames_rejected_{0};
};

}  // namespace paci
