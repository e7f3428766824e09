#include "worker/runtime/checkpoint_reader.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/runtime/checkpoint.h"
#include "worker/runtime/checkpoint_layout.h"

namespace paci {
namespace {

// Whether the shard at `path` belongs with stage 0's (`first`) as stage
// `stage` of the step `where` names.
absl::Status CheckAgrees(const std::string& path, const ShardMeta& meta, const ShardMeta& first,
                         int stage, const CheckpointStep& where) {
  if (meta.stage != stage || meta.num_stages != where.num_stages || meta.step != where.step) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint ", path, " says it is stage ", meta.stage, " of ", meta.num_stages,
        " at step ", meta.step, "; its name says stage ", stage, " of ", where.num_stages,
        " at step ", where.step));
  }
  if (meta.job_name != first.job_name) {
    return absl::FailedPreconditionError(absl::StrCat("checkpoint ", path, " is of job \"",
                                                      meta.job_name, "\", stage 0's of job \"",
                                                      first.job_name, "\""));
  }
  if (auto difference = ShapeDifference(*first.config, *meta.config)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "checkpoint ", path, " holds another model than stage 0's shard (there: this shard; ",
        "here: stage 0's): ", *difference));
  }
  return absl::OkStatus();
}

}  // namespace

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
    RETURN_IF_ERROR(CheckAgrees(path, shard.meta, first, stage, where));
    for (auto& [name, tensor] : shard.parameters) {
      if (!checkpoint.parameters.emplace(name, std::move(tensor)).second) {
        return absl::FailedPreconditionError(absl::StrCat(
            "checkpoint ", path, " holds parameter ", name, ", which an earlier stage holds too"));
      }
    }
  }
  const std::string first_path = ShardPath(directory, where.step, 0, where.num_stages);
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
