#pragma once

// The model's shape, one type for the module (gpt.h), its checkpoints, the
// cost model (partition.h) and the tools; no Torch.

#include <cstdint>

#include "paci/v1/job.pb.h"

namespace paci {

struct GptConfig {
  int vocab_size = 96;
  int num_layers = 4;
  int d_model = 128;
  int num_heads = 4;
  int seq_len = 64;
  double dropout = 0.0;
  uint64_t init_seed = 1234;
};

// The shape a job spec gives.
GptConfig GptConfigFromSpec(const v1::ModelSpec& model);

}  // namespace paci
