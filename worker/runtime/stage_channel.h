#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "paci/v1/stage.pb.h"
#include "worker/runtime/stage_model.h"
#include "worker/runtime/stage_stats.h"
#include "worker/transport/frame_sender.h"
#include "worker/transport/inbox.h"
#include "worker/transport/nccl_link.h"

namespace paci {

// One stage's traffic with its neighbours: frames to them over the stage
// links (FrameSender), frames from them in the inbox, and each frame's tensor
// in its bytes or, between two GPU stages of one node, over an NCCL link. No
// schedule: the runtime says what to send when.
//
// Used by one thread, the stage's compute thread.
class StageChannel {
 public:
  struct Options {
    int stage = 0;
    // This placement on the stage links (the run id "<job>/<attempt>").
    std::string link_id;
    Inbox* inbox = nullptr;
    FrameSender* previous = nullptr;  // null where there is no neighbour
    FrameSender* next = nullptr;
    // NCCL to the previous and/or next stage (StageHost decides).
    bool nccl_previous = false, nccl_next = false;
  };
  enum class To { kPrevious, kNext };

  StageChannel(const Options& options, StageStats& stats);
  ~StageChannel();

  // Takes the stage's placement: its device, and the dtype its activations
  // and gradients cross the links in (StagePlacement::link_dtype). Sets up
  // the NCCL links asked for on the device (a CUDA device): the lower stage
  // of each pair sends the ids as its first frame. FailedPrecondition for a
  // CPU device or a neighbour that sends no ids.
  absl::Status Connect(const StagePlacement& placement);

  // Sends a frame of `kind` to a neighbour (which must exist), carrying
  // `tensor` when given, stamped with the stage's weight version and `step`.
  // An activation, its gradient or the split head's input travels in the
  // placement's link dtype; the split head's part, scales and rows as they
  // are. A failed NCCL send fails the inbox, as a broken link does.
  void Send(To to, v1::TensorFrame::Kind kind, uint64_t micro_batch_id,
            const torch::Tensor* tensor, int64_t weight_version, int64_t step = 0);

  // The tensor a frame carries, on the model's device: from its bytes, or
  // received over NCCL when the frame says so (InvalidArgument when this link
  // has no NCCL). An activation, gradient or head input comes in the model's
  // weight dtype, whatever dtype the neighbour sent it in.
  absl::StatusOr<torch::Tensor> Incoming(const v1::TensorFrame& frame, const StageModel& model);

  // The end of training: closes the inbox, tells the next stage to shut down
  // and closes both links, waiting up to a minute for each to drain. The
  // first link's error.
  absl::Status Close(int64_t weight_version);

 private:
  // Incoming's tensor as the frame carries it, in the dtype it was sent in.
  absl::StatusOr<torch::Tensor> Received(const v1::TensorFrame& frame, const StageModel& model);

  struct NcclSend {  // a tensor NCCL may still be reading
    NcclLink* link;
    uint64_t ticket;
    torch::Tensor tensor;
  };

  const Options options_;
  StageStats& stats_;
  torch::ScalarType link_dtype_ = torch::kFloat;  // Connect's placement's
  std::deque<NcclSend> nccl_sends_;
  // After nccl_sends_: a link's destructor waits for its sends, then the
  // tensors they read are freed.
  std::unique_ptr<NcclLink> nccl_previous_, nccl_next_;
};

}  // namespace paci
