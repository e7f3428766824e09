#pragma once

#include <torch/torch.h>

#include "paci/v1/stage.pb.h"

namespace paci {

// Writes a tensor's dtype, shape and bytes into `frame` (copied from the
// device to the host when needed). Float32, bfloat16 and float16 only.
void EncodeTensor(const torch::Tensor& tensor, v1::TensorFrame* frame);

// Writes only the dtype and shape (the bytes travel another way: NCCL).
void DescribeTensor(const torch::Tensor& tensor, v1::TensorFrame* frame);

// The tensor a frame carries, on the CPU, owning its memory; in page-locked
// memory when `pinned` (a CUDA LibTorch only), so that its copy to a GPU need
// not wait. The frame must have passed ValidateFrame.
torch::Tensor DecodeTensor(const v1::TensorFrame& frame, bool pinned = false);

// The torch type of a wire dtype (float32 for an unknown one).
torch::ScalarType WireScalarType(v1::DType dtype);

}  // namespace paci
