#pragma once

#include <vector>

#include <torch/torch.h>

#include "absl/status/status.h"

namespace paci {

// How the replicas of a stage (pipeline.data_parallel) agree on each step's
// gradients before its optimizer step: one implementation per transport.
// ReplicaGroup (c10d's Gloo over a TCPStore) is the one there is; an NCCL
// all-reduce for GPU replicas would be a second. A stage without replicas
// has none (StageRuntimeOptions::gradient_sync is null).
class GradientSync {
 public:
  virtual ~GradientSync() = default;

  virtual int replica() const = 0;
  virtual int num_replicas() const = 0;

  // Replaces each tensor by its mean over the replicas. Every replica passes
  // tensors of the same shapes in the same order and ends with the same bits.
  // Unavailable, naming the peers that do not answer, when a replica is gone.
  virtual absl::Status Average(const std::vector<torch::Tensor>& tensors) = 0;
};

}  // namespace paci
