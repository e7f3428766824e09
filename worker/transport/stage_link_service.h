#pragma once

#include <atomic>
#include <cstdint>
#include <optional>

#include "absl/synchronization/mutex.h"
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
// The expectations may be set after the server starts (a worker learns its
// job only when it joins); a stream that opens before then waits up to 30 s
// for them, and is refused as UNAVAILABLE after that.
//
// Thread-safe; the Inbox must outlive the server that serves this service.
class StageLinkService final : public v1::StageLink::Service {
 public:
  explicit StageLinkService(Inbox& inbox);
  StageLinkService(const LinkExpectations& expect, Inbox& inbox);

  void SetExpectations(const LinkExpectations& expect);

  grpc::Status Push(grpc::ServerContext* context, grpc::ServerReader<v1::TensorFrame>* reader,
                    v1::PushSummary* summary) override;

  int64_t frames_rejected() const { return frames_rejected_.load(); }

 private:
  std::optional<LinkExpectations> Expectations() const;

  mutable absl::Mutex mu_;
  std::optional<LinkExpectations> expect_ ABSL_GUARDED_BY(mu_);
  Inbox& inbox_;
  std::atomic<int64_t> frames_rejected_{0};
};

}  // namespace paci
