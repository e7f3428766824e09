#pragma once

// A whole checkpoint read back as one model, whatever number of stages wrote
// it: what `paci_model` samples from and exports, and what
// checkpoint.init_from starts a job from.

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/data/tokenizer.h"
#include "worker/model/gpt.h"
#include "worker/model/gpt_weights.h"

namespace paci {

struct ModelCheckpoint {
  std::string directory;
  int64_t step = 0;     // optimizer steps the job had taken
  int num_stages = 0;   // P of the job that wrote it
  std::string job_name;
  GptConfig config;     // the shape; dropout and init_seed keep their defaults
  std::unique_ptr<Tokenizer> tokenizer;  // from stage 0's shard
  NamedWeights parameters;  // every parameter by its global name, on the CPU
};

// Reads the latest complete step of `directory` (FindLatestCheckpoint: the
// stage count comes from the shard names). Blocks on file I/O. Errors name the
// directory or the shard: NotFound when the directory does not exist or holds
// no step; FailedPrecondition for a missing shard when no step is complete;
// DataLoss for a corrupt one (LoadShard's checks); FailedPrecondition for a
// shard that disagrees with stage 0's (job, config, step, its stage numbering),
// holds a parameter another shard holds too, or lacks the config or (stage 0)
// the tokenizer; InvalidArgument for a tokenizer that does not parse.
absl::StatusOr<ModelCheckpoint> ReadCheckpoint(const std::string& directory);

}  // namespace paci
