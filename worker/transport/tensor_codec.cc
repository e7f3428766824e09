#include "worker/transport/tensor_codec.h"

#include <cstring>

namespace paci {
namespace {

v1::DType ToWire(torch::ScalarType type) {
  switch (type) {
    case torch::kFloat32: return v1::DTYPE_FLOAT32;
    case torch::kBFloat16: return v1::DTYPE_BFLOAT16;
    case torch::kFloat16: return v1::DTYPE_FLOAT16;
    default: return v1::DTYPE_UNSPECIFIED;
  }
}

torch::ScalarType FromWire(v1::DType dtype) {
  switch (dtype) {
    case v1::DTYPE_BFLOAT16: return torch::kBFloat16;
    case v1::DTYPE_FLOAT16: return torch::kFloat16;
    default: return torch::kFloat32;
  }
}

}  // namespace

void EncodeTensor(const torch::Tensor& tensor, v1::TensorFrame* frame) {
  const torch::Tensor host = tensor.detach().to(torch::kCPU).contiguous();
  frame->set_dtype(ToWire(host.scalar_type()));
  frame->clear_shape();
  for (int64_t d : host.sizes()) frame->add_shape(d);
  frame->set_data(host.data_ptr(), host.numel() * host.element_size());
}

void DescribeTensor(const torch::Tensor& tensor, v1::TensorFrame* frame) {
  frame->set_dtype(ToWire(tensor.scalar_type()));
  frame->clear_shape();
  for (int64_t d : tensor.sizes()) frame->add_shape(d);
  frame->set_payload_on_nccl(true);
}

torch::ScalarType WireScalarType(v1::DType dtype) { return FromWire(dtype); }

torch::Tensor DecodeTensor(const v1::TensorFrame& frame, bool pinned) {
  std::vector<int64_t> shape(frame.shape().begin(), frame.shape().end());
  torch::Tensor tensor =
      torch::empty(shape, torch::dtype(FromWire(frame.dtype())).pinned_memory(pinned));
  std::memcpy(tensor.data_ptr(), frame.data().data(), frame.data().size());
  return tensor;
}

}  // namespace paci
