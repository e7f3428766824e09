#include "worker/transport/frame_validator.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace paci {

int64_t DTypeSize(v1::DType dtype) {
  switch (dtype) {
    case v1::DTYPE_FLOAT32: return 4;
    case v1::DTYPE_BFLOAT16:
    case v1::DTYPE_FLOAT16: return 2;
    default: return 0;
  }
}

absl::Status ValidateFrame(const v1::TensorFrame& f, const LinkExpectations& e) {
  auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stage ", e.stage, " refused a ", v1::TensorFrame::Kind_Name(f.kind()),
        " frame for micro-batch ", f.micro_batch_id(), " from stage ", f.from_stage(), ": ", what));
  };
  if (f.job_name() != e.job_name) {
    return bad(absl::StrCat("job_name is \"", f.job_name(), "\", expected \"", e.job_name, "\""));
  }
  const bool from_next = f.kind() == v1::TensorFrame::GRADIENT ||
                         f.kind() == v1::TensorFrame::HEAD_INPUT ||
                         f.kind() == v1::TensorFrame::HEAD_SCALE;
  bool head = false;
  switch (f.kind()) {
    case v1::TensorFrame::ACTIVATION:
    case v1::TensorFrame::GRADIENT:
    case v1::TensorFrame::EVAL_ACTIVATION:
    case v1::TensorFrame::CHECKPOINT:
    case v1::TensorFrame::SHUTDOWN:
    case v1::TensorFrame::NCCL_IDS:
      break;
    case v1::TensorFrame::HEAD_INPUT:
    case v1::TensorFrame::HEAD_PART:
    case v1::TensorFrame::HEAD_SCALE:
    case v1::TensorFrame::HEAD_ROWS:
      head = true;
      break;
    default:
      return bad(absl::StrCat("kind ", static_cast<int>(f.kind()), " is not a known frame kind"));
  }
  if (head) {
    // Only the last two stages of a split head trade these.
    const bool receiver = from_next ? e.stage == e.num_stages - 2 : e.stage == e.num_stages - 1;
    if (e.head_rows <= 0 || !receiver) {
      return bad("this stage does not share the head's rows with that one");
    }
    if (f.payload_on_nccl()) return bad("the head's frames carry their tensor in data");
  }
  const int expected_sender = from_next ? e.stage + 1 : e.stage - 1;
  if (f.from_stage() != expected_sender || expected_sender < 0 || expected_sender >= e.num_stages) {
    return bad(absl::StrCat("from_stage must be ", expected_sender, " for this kind"));
  }
  if (f.kind() == v1::TensorFrame::NCCL_IDS) {
    if (f.shape_size() != 0 || f.data().size() != kNcclIdsBytes) {
      return bad(absl::StrCat("NCCL ids take ", kNcclIdsBytes, " bytes and no shape"));
    }
    return absl::OkStatus();
  }
  if (f.kind() == v1::TensorFrame::CHECKPOINT || f.kind() == v1::TensorFrame::SHUTDOWN) {
    if (f.shape_size() != 0 || !f.data().empty()) return bad("a control frame carries no tensor");
    return absl::OkStatus();
  }
  // The head's parts, scales and rows travel in float32; the final norm's
  // output as the hidden states do.
  std::vector<int64_t> expected_shape = e.hidden_shape;
  std::vector<v1::DType> expected_dtypes = e.dtypes;
  if (head && f.kind() != v1::TensorFrame::HEAD_INPUT && e.hidden_shape.size() == 3) {
    const int64_t tokens = e.hidden_shape[0] * e.hidden_shape[1], d = e.hidden_shape[2];
    expected_dtypes = {v1::DTYPE_FLOAT32};
    if (f.kind() == v1::TensorFrame::HEAD_PART) expected_shape = {tokens, 2 * d + 2};
    if (f.kind() == v1::TensorFrame::HEAD_SCALE) expected_shape = {tokens};
    if (f.kind() == v1::TensorFrame::HEAD_ROWS) expected_shape = {e.head_rows, d};
  }
  if (std::find(expected_dtypes.begin(), expected_dtypes.end(), f.dtype()) ==
      expected_dtypes.end()) {
    return bad(absl::StrCat(
        "dtype is ", v1::DType_Name(f.dtype()), ", expected ",
        absl::StrJoin(expected_dtypes, " or ", [](std::string* out, v1::DType dtype) {
          out->append(v1::DType_Name(dtype));
        })));
  }
  const std::vector<int64_t> shape(f.shape().begin(), f.shape().end());
  if (shape != expected_shape) {
    return bad(absl::StrCat("shape is [", absl::StrJoin(shape, ", "), "], expected [",
                            absl::StrJoin(expected_shape, ", "), "]"));
  }
  int64_t elements = 1;
  for (int64_t d : shape) elements *= d;
  if (f.payload_on_nccl()) {
    if (!f.data().empty()) return bad("a frame whose tensor comes over NCCL carries no data");
    return absl::OkStatus();
  }
  const int64_t expected_bytes = elements * DTypeSize(f.dtype());
  if (static_cast<int64_t>(f.data().size()) != expected_bytes) {
    return bad(absl::StrCat("data has ", f.data().size(), " bytes, shape and dtype need ",
                            expected_bytes));
  }
  return absl::OkStatus();
}

}  // namespace paci
