#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "paci/v1/stage.pb.h"

namespace paci {

// What a stage accepts on its link. Every tensor between stages is the hidden
// state (or its gradient): [micro_batch_size, seq_len, d_model].
// The metadata key of a stage link stream's attempt secret
// (StageAssignment.link_secret).
inline constexpr char kLinkSecretMetadata[] = "paci-link-secret";
// The metadata key of the run id (RunId: "<job>/<attempt>") a stage link
// stream belongs to. Not a credential: it only tells a worker still running
// an earlier attempt's stage that this stream's stage is on its way.
inline constexpr char kLinkRunMetadata[] = "paci-link-run";
// The initial metadata key a worker sends on a stage link stream it has
// accepted (after the secret): the sender waits for it before it writes, and a
// stream that ends without it was refused, with the status saying why.
inline constexpr char kLinkAcceptedMetadata[] = "paci-link-accepted";

struct LinkExpectations {
  std::string job_name;
  std::string secret;  // the attempt's link secret; empty: none asked (tests)
  int stage = 0;
  int num_stages = 1;
  std::vector<int64_t> hidden_shape;
  // The dtypes the hidden states and their gradients may come in: the one
  // the job's precision sends, or float32 and bfloat16 where `auto` lets
  // each stage choose (StagePlacement::link_dtype).
  std::vector<v1::DType> dtypes = {v1::DTYPE_FLOAT32};
  // The head's rows the stage before the last holds when the head is split
  // by vocabulary (PartitionPlan::head_split); 0: no HEAD_* frame is accepted.
  int64_t head_rows = 0;
};

// Checks a frame from the network before anything trusts it: the job, the
// sender (s-1 for activations and control, s+1 for gradients and the
// HEAD_INPUT and HEAD_SCALE of a split head), the kind (HEAD_* only between
// the two stages of a split head), the
// dtype, the shape and that the byte count matches. InvalidArgument naming
// the offending field otherwise. Pure function.
absl::Status ValidateFrame(const v1::TensorFrame& frame, const LinkExpectations& expect);

// Bytes of an NCCL_IDS frame's data (NcclLink::kIdsBytes).
inline constexpr size_t kNcclIdsBytes = 256;

// Bytes per element of `dtype`, 0 for DTYPE_UNSPECIFIED.
int64_t DTypeSize(v1::DType dtype);

}  // namespace paci
