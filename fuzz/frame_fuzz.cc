// A tensor frame as it arrives on a stage's link: any bytes, parsed as a
// v1::TensorFrame and checked by ValidateFrame against a stage's expectations.
// The validator must answer every frame (accept or InvalidArgument), never
// crash, and accept a tensor frame only with exactly the expected shape and
// the bytes that shape needs.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include <google/protobuf/stubs/logging.h>

#include "worker/transport/frame_validator.h"

// Protobuf logs every string field that is not UTF-8; the fuzzer makes many.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  paci::v1::TensorFrame frame;
  if (!frame.ParseFromArray(data, static_cast<int>(size))) return 0;
  for (int stage : {0, 1, 2}) {
    paci::LinkExpectations expect;
    expect.job_name = "fuzz";
    expect.stage = stage;
    expect.num_stages = 3;
    expect.hidden_shape = {2, 4, 8};
    const absl::Status status = paci::ValidateFrame(frame, expect);
    if (!status.ok()) {
      if (status.code() != absl::StatusCode::kInvalidArgument) std::abort();
      continue;
    }
    const bool tensor = frame.kind() == paci::v1::TensorFrame::ACTIVATION ||
                        frame.kind() == paci::v1::TensorFrame::GRADIENT ||
                        frame.kind() == paci::v1::TensorFrame::EVAL_ACTIVATION;
    if (!tensor || frame.payload_on_nccl()) continue;
    const std::vector<int64_t> shape(frame.shape().begin(), frame.shape().end());
    if (shape != expect.hidden_shape) std::abort();
    if (static_cast<int64_t>(frame.data().size()) != 2 * 4 * 8 * paci::DTypeSize(frame.dtype())) {
      std::abort();
    }
  }
  return 0;
}
