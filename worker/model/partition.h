#pragma once

namespace paci {

// Which part of the GPT a stage holds: blocks [first_block, end_block), plus
// the embeddings on the first stage and the final LayerNorm and LM head on the
// last. Blocks are balanced: the first num_layers % num_stages stages hold one
// more.
struct StagePartition {
  int first_block = 0;
  int end_block = 0;
  bool has_embedding = false;
  bool has_head = false;
};

// Requires 1 <= num_stages <= num_layers and 0 <= stage < num_stages (checked
// by ValidateJobSpec before any stage is built).
StagePartition PartitionStage(int num_layers, int num_stages, int stage);

}  // namespace paci
