#pragma once

// Weights by their global parameter names ("h3.attn.qkv.weight"), in and out
// of a GptStage of any cut: how a checkpoint of P stages becomes a model of
// one (inference, export) or of another cut (checkpoint.init_from).

#include <map>
#include <string>

#include <torch/torch.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/model/gpt.h"

namespace paci {

using NamedWeights = std::map<std::string, torch::Tensor>;

// Copies into each parameter of `model` the tensor of the same name in
// `weights`, converted to the parameter's device and dtype. Names in `weights`
// that `model` lacks are ignored (they are other stages'). FailedPrecondition
// naming `source` and the parameter when `weights` lacks it, or naming both
// shapes when they differ; on error the model is unchanged.
absl::Status CopyWeightsByName(const NamedWeights& weights, const std::string& source,
                               torch::nn::Module& model);

// The whole model (one stage of one) of `config` holding `weights`, in eval
// mode, on the CPU. The errors of CopyWeightsByName, and FailedPrecondition
// naming an entry of `weights` that the model has no parameter for.
absl::StatusOr<GptStage> GptFromWeights(const GptConfig& config, const NamedWeights& weights,
                                        const std::string& source);

}  // namespace paci
