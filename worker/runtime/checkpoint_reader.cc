#include "worker/runtime/checkpoint_reader.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/runtime/checkpoint.h"
#include "worker/runtime/checkpoint_layout.h"

namespace paci {

absl::StatusOr<ModelCheckpoint> ReadCheckpoint(const std::string& directory) {
  ASSIGN_OR_RETURN(const CheckpointStep where, FindLatestCheckpoint(directory));
  ModelCheckpoint checkpoint;
  checkpoint.directory = directory;
  checkpoint.step = where.step;
  checkpoint.num_stages = where.num_stages;
  ShardMeta first;
  for (int stage = 0; stage < where.num_stages; ++stage) {
    const std::string path = ShardPath(directory, where.step, stage, where.num_stages);
    ASSIGN_OR_RETURN(ShardParameters shard, ReadShard(path));
    if (stage == 0) first = shard.meta;
    RETURN_IF_ERROR(
        CheckShardAgrees(path, shard.meta, first, stage, where.num_stages, where.step));
    for (auto& [name, tensor] : shard.parameters) {
      RETURN_IF_ERROR(MergeShardTensor(path, name, std::move(tensor), checkpoint.parameters));
    }
  }
  const std::string first_path = ShardPath(directory, where.step, 0, where.num_stages);
  // A split head's rows, joined, make the whole vocabulary.
  const auto head = checkpoint.parameters.find("head.weight");
  if (head != checkpoint.parameters.end() && first.config &&
      head->second.size(0) != first.config->vocab_size) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint ", StepDirectory(directory, where.step), ": its shards hold ",
        head->second.size(0), " rows of head.weight, model.vocab_size is ",
        first.config->vocab_size));
  }
  if (first.tokenizer.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint ", first_path, " holds no tokenizer (written by an older paci)"));
  }
  ASSIGN_OR_RETURN(checkpoint.tokenizer, ParseTokenizer(first.tokenizer, first_path));
  checkpoint.job_name = first.job_name;
  checkpoint.config = *first.config;
  return checkpoint;
}

}  // namespace paci
