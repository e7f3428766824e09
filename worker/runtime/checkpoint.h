#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

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
  // The data position: the samples consumed so far by every replica (with one
  // replica, the next micro-batch id).
  uint64_t next_micro_batch = 0;
  // The model's shape: vocab_size, num_layers, d_model, num_heads and seq_len
  // (the other fields keep their defaults). SaveShard records the model's
  // own config and ignores this; nullopt when read from a shard written
  // before shards recorded it.
  std::optional<GptConfig> config;
  // Stage 0's shard: the Tokenizer::Serialize() bytes of the tokenizer that
  // made the training tokens. Empty on the other stages.
  std::string tokenizer;
};

// Writes one stage's shard: parameters, AdamW moments and step, and `meta`,
// through LibTorch's archive, followed by a CRC-32 footer over the archive.
// Written with WriteFileAtomically (a temporary file, synced and renamed), so
// an existing shard is never half-replaced and a written one survives a crash.
absl::Status SaveShard(const std::string& path, const ShardMeta& meta, GptStage& model,
                       AdamW& optimizer);

// Reads a shard and, only if all of it is sound and matches `expected` (job,
// stage, num_stages, fingerprint) and the model's parameter names and shapes,
// copies it into `model` and `optimizer`. Returns the shard's metadata.
// DataLoss for a corrupt or truncated file, FailedPrecondition naming the
// mismatch; on error neither the model, the optimizer nor the file changes.
absl::StatusOr<ShardMeta> LoadShard(const std::string& path, const ShardMeta& expected,
                                    GptStage& model, AdamW& optimizer);

// Whether the shard at `path` is whole: its footer's size and CRC-32 match
// what it holds (a crash or a full disk mid-write breaks that). DataLoss
// naming the file otherwise; NotFound when it cannot be read. Reads it all.
absl::Status VerifyShard(const std::string& path);

// Where a job's stages resume: the newest complete step of `directory` whose
// `num_stages` shards all verify. Every stage reads the same files, so all
// choose the same step. Each newer complete step passed over is added to
// `passed_over` with why ("step 40: checkpoint ... is truncated ..."), so a
// torn step is reported, not fatal. nullopt when there is no complete step;
// DataLoss listing them when complete steps exist and none verifies.
absl::StatusOr<std::optional<int64_t>> LatestSoundStep(const std::string& directory,
                                                       int num_stages,
                                                       std::vector<std::string>* passed_over);

// A shard read on its own, with no model to match: its metadata and every
// parameter by its global name, on the CPU (the optimizer state is not read).
struct ShardParameters {
  ShardMeta meta;
  std::map<std::string, torch::Tensor> parameters;
};

// Reads the shard at `path` (blocking file I/O). DataLoss naming the file for
// a corrupt, truncated or forged one (the checks of LoadShard);
// FailedPrecondition naming it when it was written before shards recorded
// their config and parameter names.
absl::StatusOr<ShardParameters> ReadShard(const std::string& path);

}  // namespace paci
