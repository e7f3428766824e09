#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace paci {

// Where checkpoint shards live: <directory>/step-00000100/stage-0-of-2.pt.
// A step's checkpoint is complete when every stage's shard is there; shards
// are written to a temporary name and renamed, so a present shard was whole
// when written (CheckStep, checkpoint.h, says whether it still is and whether
// the shards belong together).
std::string StepDirectory(const std::string& directory, int64_t step);
std::string ShardPath(const std::string& directory, int64_t step, int stage, int num_stages);

// The steps with all `num_stages` shards, oldest first; none when the
// directory does not exist. Pure file-system scan.
absl::StatusOr<std::vector<int64_t>> CompleteSteps(const std::string& directory, int num_stages);

// The highest of CompleteSteps, nullopt when there is none.
absl::StatusOr<std::optional<int64_t>> LatestCompleteStep(const std::string& directory,
                                                          int num_stages);

// The file work of checkpoint.keep (PruneSteps, checkpoint.h, decides which
// steps go): removes the shards of `num_stages` stages (and their temporary
// files) of every step older than `oldest_kept`, and a step folder left
// empty. Files of another stage count are left alone. Returns the steps it
// removed shards of; Unavailable naming a file it could not remove.
absl::StatusOr<std::vector<int64_t>> RemoveStepsBefore(const std::string& directory,
                                                       int num_stages, int64_t oldest_kept);

// Whether `directory` holds any step-* folder.
bool HoldsCheckpoints(const std::string& directory);

// The stage counts P of the shards (stage-S-of-P.pt) in any step folder of
// `directory`; none when it does not exist or holds no step. Pure file-system
// scan.
absl::StatusOr<std::set<int>> StageCounts(const std::string& directory);

// A complete step of a checkpoint directory and the stage count that wrote it.
struct CheckpointStep {
  int64_t step = 0;
  int num_stages = 0;
};

// The latest complete step written by any number of stages P, found from the
// shard names (stage-S-of-P.pt). NotFound naming `directory` when it does not
// exist or holds no step-* folder; FailedPrecondition naming the first
// missing shard of the latest step when no step is complete, or the step
// when it holds complete checkpoints of two stage counts. Pure file-system scan.
absl::StatusOr<CheckpointStep> FindLatestCheckpoint(const std::string& directory);

}  // namespace paci
