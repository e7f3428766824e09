#include "worker/model/partition.h"

#include <algorithm>

namespace paci {

StagePartition PartitionStage(int num_layers, int num_stages, int stage) {
  const int base = num_layers / num_stages;
  const int extra = num_layers % num_stages;
  StagePartition p;
  p.first_block = stage * base + std::min(stage, extra);
  p.end_block = p.first_block + base + (stage < extra ? 1 : 0);
  p.has_embedding = stage == 0;
  p.has_head = stage == num_stages - 1;
  return p;
}

}  // namespace paci
