#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/model/adamw.h"
#include "worker/model/gpt.h"
#include "worker/runtime/checkpoint_layout.h"

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

// Reads a shard and, only if all of it is sound and matches `expected`
// (stage, num_stages, fingerprint) and the model's parameter names and shapes,
// copies it into `model` and `optimizer`. Returns the shard's metadata. The
// job and step it records are not checked here: CheckStep checks them across
// all the shards of a step.
// DataLoss for a corrupt or truncated file, FailedPrecondition naming the
// mismatch; on error neither the model, the optimizer nor the file changes.
absl::StatusOr<ShardMeta> LoadShard(const std::string& path, const ShardMeta& expected,
                                    GptStage& model, AdamW& optimizer);

// The metadata of the shard at `path`, its parameters left unread; the
// errors of ReadShard.
absl::StatusOr<ShardMeta> ReadShardMeta(const std::string& path);

// Whether the shard at `path` is whole: its footer's size and CRC-32 match
// what it holds (a crash or a full disk mid-write breaks that). DataLoss
// naming the file otherwise; NotFound when it cannot be read. Reads it all.
absl::Status VerifyShard(const std::string& path);

// Whether the shard at `path`, which says `meta` of itself, belongs in its
// step folder as stage `stage` of `num_stages` at `step` (what its name and
// folder say) beside that step's stage 0 shard, which says `first` (stage 0's
// own shard is checked against itself): it records that stage, stage count
// and step, stage 0's job and, where both record one, stage 0's model shape.
// FailedPrecondition naming the shard and what differs otherwise: "checkpoint
// <path> says it is stage 0 of 2 at step 20; its name says stage 0 of 2 at
// step 30", "checkpoint <path> is of job "b", stage 0's of job "a"". The one
// check of both resume (CheckStep) and a checkpoint read whole (ReadCheckpoint).
absl::Status CheckShardAgrees(const std::string& path, const ShardMeta& meta,
                              const ShardMeta& first, int stage, int num_stages, int64_t step);

// Whether step `step` of `directory` is whole, so that a job may resume from
// it and checkpoint.keep may count it: each of its `num_stages` shards
// verifies (VerifyShard), reads as a paci shard and agrees with stage 0's
// (CheckShardAgrees: one job, and the step its folder names). Reads every
// shard of the step, whichever stage asks, so every stage decides alike.
// Errors name the shard: NotFound when one is missing or unreadable, DataLoss
// for a corrupt one, FailedPrecondition for one that does not belong.
absl::Status CheckStep(const std::string& directory, int64_t step, int num_stages);

// Where a job's stages resume: the newest complete step of `directory` that
// CheckStep finds whole. Every stage reads the same files, so all choose the
// same step. Each newer complete step passed over is added to `passed_over`
// with why ("step 40: checkpoint ... is truncated ...", "step 30: checkpoint
// .../stage-0-of-2.pt says it is stage 0 of 2 at step 20; its name says
// stage 0 of 2 at step 30"), so a torn or mixed step is reported, not fatal.
// nullopt when there is no complete step. When complete steps exist and none
// is whole, an error listing each: DataLoss when one of them is corrupt or
// unreadable, FailedPrecondition when every one holds a shard that does not
// belong.
absl::StatusOr<std::optional<int64_t>> LatestSoundStep(const std::string& directory,
                                                       int num_stages,
                                                       std::vector<std::string>* passed_over);

// Where a job resumes whatever its shape: the newest step that LatestSoundStep
// finds whole among the shards of every stage count in `directory`, and the
// count that wrote it (the job's own count, `num_stages`, when two counts
// have the same step). nullopt when no count has a complete step. An error of
// LatestSoundStep's (complete steps, none whole) only when no count has a
// whole step. A job resumed at another count re-cuts it (LoadRecut).
absl::StatusOr<std::optional<CheckpointStep>> LatestSoundCheckpoint(
    const std::string& directory, int num_stages, std::vector<std::string>* passed_over);

// Adds a shard's tensor `name` to `whole`, the tensors of the shards read
// before it (in stage order): a split head's weight and its AdamW state
// (IsHeadWeight, gpt.h) join the earlier stage's rows; any other name held
// twice is FailedPrecondition naming the shard at `path`.
absl::Status MergeShardTensor(const std::string& path, const std::string& name,
                              torch::Tensor tensor, std::map<std::string, torch::Tensor>& whole);

// Loads step `step` of `directory`, written by `from_stages` stages (CheckStep
// found it whole), into this stage of another cut: every shard of the step is
// read, and each of this stage's parameters and its AdamW state (moments,
// master weights of non-float32 parameters: from the parameter where the step
// kept none) is taken by its global name; the optimizer's step count is the
// shards'. Returns stage 0's metadata (its step, data position and job).
// FailedPrecondition naming the step for a model of another shape, a
// parameter or moment no shard holds or of another shape, or shards at
// different optimizer step counts; DataLoss for a corrupt shard. On error
// neither the model nor the optimizer changes.
absl::StatusOr<ShardMeta> LoadRecut(const std::string& directory, int64_t step, int from_stages,
                                    GptStage& model, AdamW& optimizer);

// checkpoint.keep: removes the shards of `num_stages` stages (and their
// temporary files) of every step older than the newest `keep` steps that
// CheckStep finds whole (keep 0: nothing), and a step folder left empty
// (RemoveStepsBefore). Any stage may run it after its save: only steps no
// stage writes any more go; the newest `keep` whole steps, and every step
// newer than them, stay. A complete step that is corrupt or mixed counts for
// nothing, so it cannot push out the last step a resume can use; nothing goes
// while fewer than `keep` steps are whole. Files of another stage count are
// left alone.
// `whole`, when given, holds steps already found whole (their shards are not
// read again) and gets the ones found now. Returns the steps it pruned;
// Unavailable naming a file it could not remove.
absl::StatusOr<std::vector<int64_t>> PruneSteps(const std::string& directory, int num_stages,
                                                int keep, std::set<int64_t>* whole = nullptr);

// After a job changed its number of stages (checkpoint_recut.cc): once
// `num_stages` has `keep` whole steps (`whole`, as PruneSteps leaves it), the
// shards of every other stage count older than the oldest of them are
// removed: a resume takes the newest whole step, which is then this count's.
// keep 0 keeps everything. Returns the steps it removed shards of;
// Unavailable naming a file it could not remove.
absl::StatusOr<std::vector<int64_t>> PruneOtherStageCounts(const std::string& directory,
                                                           int num_stages, int keep,
                                                           const std::set<int64_t>& whole);

// A shard read on its own, with no model to match: its metadata and every
// parameter by its global name, on the CPU; with_optimizer, its AdamW state
// too (AdamW::State()'s names) and step count.
struct ShardParameters {
  ShardMeta meta;
  std::map<std::string, torch::Tensor> parameters;
  std::map<std::string, torch::Tensor> optimizer_state;  // with_optimizer only
  int64_t optimizer_steps = 0;                            // with_optimizer only
};

// Reads the shard at `path` (blocking file I/O). DataLoss naming the file for
// a corrupt, truncated or forged one (the checks of LoadShard);
// FailedPrecondition naming it when it was written before shards recorded
// their config and parameter names.
absl::StatusOr<ShardParameters> ReadShard(const std::string& path, bool with_optimizer = false);

}  // namespace paci
