#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/model/adamw.h"
#include "worker/model/gpt.h"

namespace paci {

// What a shard says about itself; checked on load.
struct ShardMeta {
  std::string job_name;
  int stage = 0;
  int num_stages = 1;
  std::string model_fingerprint;  // GptStageImpl::Fingerprint()
  int64_t step = 0;               // optimizer steps taken (the drained point)
  uint64_t next_micro_batch = 0;  // the data position: the next micro-batch id
};

// Writes one stage's shard: parameters, AdamW moments and step, and `meta`,
// through LibTorch's archive, followed by a CRC-32 footer over the archive.
// Written to a temporary file and renamed, so an existing shard is never
// half-replaced.
absl::Status SaveShard(const std::string& path, const ShardMeta& meta, GptStage& model,
                       AdamW& optimizer);

// Reads a shard and, only if all of it is sound and matches `expected` (job,
// stage, num_stages, fingerprint) and the model's parameter names and shapes,
// copies it into `model` and `optimizer`. Returns the shard's metadata.
// DataLoss for a corrupt or truncated file, FailedPrecondition naming the
// mismatch; on error neither the model, the optimizer nor the file changes.
absl::StatusOr<ShardMeta> LoadShard(const std::string& path, const ShardMeta& expected,
                                    GptStage& model, AdamW& optimizer);

}  // namespace paci
