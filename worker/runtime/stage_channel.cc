#include "worker/runtime/stage_channel.h"

#include <utility>
#include <vector>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/transport/tensor_codec.h"

namespace paci {
namespace {

NcclDType NcclTypeOf(torch::ScalarType type) {
  return type == torch::kBFloat16 ? NcclDType::kBFloat16
         : type == torch::kFloat16 ? NcclDType::kFloat16
                                   : NcclDType::kFloat32;
}

// The frames whose tensor is a stage's activations or their gradient, which
// cross in the link dtype. The split head's part, scales and rows carry sums
// of exponentials and weights that stay float32.
bool CarriesActivations(v1::TensorFrame::Kind kind) {
  return kind == v1::TensorFrame::ACTIVATION || kind == v1::TensorFrame::GRADIENT ||
         kind == v1::TensorFrame::EVAL_ACTIVATION || kind == v1::TensorFrame::HEAD_INPUT;
}

}  // namespace

StageChannel::StageChannel(const Options& options, StageStats& stats)
    : options_(options), stats_(stats) {}

StageChannel::~StageChannel() = default;

absl::Status StageChannel::Connect(const StagePlacement& placement) {
  link_dtype_ = placement.link_dtype();
  const torch::Device& device = placement.device;
  const int stage = options_.stage;
  const int index = device.is_cuda() ? device.index() : -1;
  if ((options_.nccl_previous || options_.nccl_next) && index < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("stage ", stage, ": NCCL links need a CUDA device, runtime.device is cpu"));
  }
  if (options_.nccl_previous) {
    std::optional<v1::TensorFrame> frame = options_.inbox->Pop(Inbox::From::kPrevious);
    if (!frame || frame->kind() != v1::TensorFrame::NCCL_IDS) {
      return absl::FailedPreconditionError(absl::StrCat(
          "stage ", stage, ": stage ", stage - 1, " did not open the NCCL link (no NCCL_IDS)"));
    }
    ASSIGN_OR_RETURN(nccl_previous_, NcclLink::Connect(frame->data(), false, index));
    LOG(INFO) << "stage " << stage << ": NCCL link to stage " << stage - 1;
  }
  if (options_.nccl_next) {
    ASSIGN_OR_RETURN(std::string ids, NcclLink::NewIds());
    v1::TensorFrame frame;
    frame.set_kind(v1::TensorFrame::NCCL_IDS);
    frame.set_job_name(options_.link_id);
    frame.set_from_stage(stage);
    frame.set_data(ids);
    options_.next->Send(std::move(frame));
    ASSIGN_OR_RETURN(nccl_next_, NcclLink::Connect(ids, true, index));
    LOG(INFO) << "stage " << stage << ": NCCL link to stage " << stage + 1;
  }
  return absl::OkStatus();
}

void StageChannel::Send(To to, v1::TensorFrame::Kind kind, uint64_t micro_batch_id,
                        const torch::Tensor* tensor, int64_t weight_version, int64_t step) {
  v1::TensorFrame frame;
  frame.set_kind(kind);
  frame.set_job_name(options_.link_id);
  frame.set_from_stage(options_.stage);
  frame.set_micro_batch_id(micro_batch_id);
  frame.set_weight_version(weight_version);
  frame.set_step(step);
  const bool forward = to == To::kNext;
  NcclLink* link = forward ? nccl_next_.get() : nccl_previous_.get();
  int64_t bytes = 0;
  // The split head's frames carry their bytes: the head's queue is read out
  // of turn with the others, which an NCCL link's order cannot follow.
  const bool head = Inbox::IsHeadFrame(kind) || kind == v1::TensorFrame::HEAD_ROWS;
  torch::Tensor wire;
  if (tensor) {
    wire = tensor->detach();
    if (CarriesActivations(kind) && wire.is_floating_point()) wire = wire.to(link_dtype_);
  }
  if (tensor && link != nullptr && !head) {
    // Let go of tensors whose sends are done, then queue this one.
    while (!nccl_sends_.empty() && nccl_sends_.front().link->Done(nccl_sends_.front().ticket)) {
      nccl_sends_.pop_front();
    }
    torch::Tensor payload = wire.contiguous();
    DescribeTensor(payload, &frame);
    absl::StatusOr<uint64_t> ticket =
        link->Send(payload.data_ptr(), payload.numel(), NcclTypeOf(payload.scalar_type()));
    if (!ticket.ok()) {
      options_.inbox->Fail(ticket.status());
      return;
    }
    nccl_sends_.push_back({link, *ticket, payload});
    bytes = payload.numel() * payload.element_size();
  } else if (tensor) {
    EncodeTensor(wire, &frame);
    bytes = frame.data().size();
  }
  FrameSender* sender = forward ? options_.next : options_.previous;
  if (sender->Send(std::move(frame))) stats_.AddBytesSent(forward, bytes);
}

absl::StatusOr<torch::Tensor> StageChannel::Incoming(const v1::TensorFrame& frame,
                                                     const StageModel& model) {
  ASSIGN_OR_RETURN(torch::Tensor tensor, Received(frame, model));
  const torch::ScalarType own = model.placement().weight_dtype();
  if (CarriesActivations(frame.kind()) && tensor.scalar_type() != own) return tensor.to(own);
  return tensor;
}

absl::StatusOr<torch::Tensor> StageChannel::Received(const v1::TensorFrame& frame,
                                                     const StageModel& model) {
  const torch::Device& device = model.placement().device;
  if (!frame.payload_on_nccl()) return model.ToDevice(DecodeTensor(frame, device.is_cuda()));
  NcclLink* link =
      frame.kind() == v1::TensorFrame::GRADIENT ? nccl_next_.get() : nccl_previous_.get();
  if (link == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stage ", options_.stage, ": a ", v1::TensorFrame::Kind_Name(frame.kind()),
        " frame says its tensor comes over NCCL, but this link has no NCCL"));
  }
  std::vector<int64_t> shape(frame.shape().begin(), frame.shape().end());
  torch::Tensor tensor = torch::empty(
      shape, torch::TensorOptions().dtype(WireScalarType(frame.dtype())).device(device));
  RETURN_IF_ERROR(
      link->Receive(tensor.data_ptr(), tensor.numel(), NcclTypeOf(tensor.scalar_type())));
  return tensor;
}

absl::Status StageChannel::Close(int64_t weight_version) {
  // Closing the inbox first makes the neighbours' streams end as orderly.
  options_.inbox->Close();
  if (options_.next != nullptr) Send(To::kNext, v1::TensorFrame::SHUTDOWN, 0, nullptr, weight_version);
  absl::Status status;
  for (FrameSender* sender : {options_.next, options_.previous}) {
    if (sender == nullptr) continue;
    absl::Status closed = sender->Close(absl::Seconds(60));
    if (status.ok()) status = closed;
  }
  return status;
}

}  // namespace paci
