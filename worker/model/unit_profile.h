#pragma once

// A short measurement of each partition unit's forward, backward and optimizer
// step at a job's shapes on a device: what the FLOP model of partition.h
// predicts, measured. Used by `paci_worker --profile_units` (and through it
// bench/stage_balance.py) to check and calibrate the model; the cut the
// workers train with stays the deterministic one of PlanPartition. Includes
// Torch: only worker/ code includes this header.

#include <string>
#include <vector>

#include <torch/torch.h>

#include "worker/model/gpt.h"
#include "worker/model/partition.h"

namespace paci {

struct UnitProfileOptions {
  int micro_batch_size = 4;
  int accumulation = 1;  // UnitCost::optimizer is one step's time / accumulation
  int warmup = 2;        // untimed repetitions first
  int repeats = 5;       // timed repetitions; the median is kept
  torch::Device device = torch::kCPU;
};

// Seconds per micro-batch of every unit 0 .. NumPartitionUnits - 1, each built
// alone as a one-unit GptStage (the head with its loss). Not thread-safe; uses
// the calling thread's Torch thread settings.
std::vector<UnitCost> ProfileUnitCosts(const GptConfig& config, const UnitProfileOptions& options);

// The spec's units measured on `device` (ms per micro-batch) beside the FLOP
// model's (G FLOP-equivalents), and the balanced cut of each, as JSON:
// {"units": [{"unit", "name", "forward_ms", "backward_ms", "optimizer_ms",
// "model_gflop"}...], "measured_cut": [...], "model_cut": [...], "measured_head_split": R,
// "model_head_split": R} (the balanced cut's head split by vocabulary, 0 for none).
std::string UnitProfileReport(const v1::JobSpec& spec, const torch::Device& device);

}  // namespace paci
