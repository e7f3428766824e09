#include "worker/model/gpt_weights.h"

#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "worker/model/partition.h"

namespace paci {
namespace {

// "blocks.0.attn" of "blocks.0.attn.qkv.weight"'s parent: the module that holds
// a parameter ("head" of "head.weight").
std::string ModuleOf(const std::string& parameter) {
  return parameter.substr(0, parameter.rfind('.'));
}

}  // namespace

absl::Status CopyWeightsByName(const NamedWeights& weights, const std::string& source,
                               torch::nn::Module& model) {
  const auto parameters = model.named_parameters(/*recurse=*/true);
  // A weight of a module this model holds that is none of its parameters (a
  // bias where this model has none: the LM head of older gpt2 checkpoints)
  // would be dropped without a word: refused instead.
  std::set<std::string> modules;
  for (const auto& item : parameters) modules.insert(ModuleOf(item.key()));
  for (const auto& [name, tensor] : weights) {
    if (modules.count(ModuleOf(name)) > 0 && parameters.find(name) == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          source, " holds parameter ", name, ", which this model has not (a bias where this ",
          "architecture has none?): it was written by another model"));
    }
  }
  for (const auto& item : parameters) {  // check everything before changing anything
    const auto found = weights.find(item.key());
    if (found == weights.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat(source, " has no parameter ", item.key()));
    }
    if (found->second.sizes() != item.value().sizes()) {
      return absl::FailedPreconditionError(absl::StrCat(
          source, ": parameter ", item.key(), " has shape ", c10::str(found->second.sizes()),
          ", this model's has ", c10::str(item.value().sizes())));
    }
  }
  // Through data(), as every writer of parameters (docs/design.md, section 3).
  torch::NoGradGuard no_grad;
  for (const auto& item : parameters) item.value().data().copy_(weights.at(item.key()));
  return absl::OkStatus();
}

absl::StatusOr<GptStage> GptFromWeights(const GptConfig& config, const NamedWeights& weights,
                                        const std::string& source) {
  if (config.vocab_size < 1 || config.num_layers < 1 || config.num_heads < 1 ||
      config.seq_len < 1 || config.d_model < 1 || config.d_model % config.num_heads != 0) {
    return absl::FailedPreconditionError(absl::StrCat(
        source, ": not a model shape: vocab_size=", config.vocab_size, " num_layers=",
        config.num_layers, " d_model=", config.d_model, " num_heads=", config.num_heads,
        " seq_len=", config.seq_len));
  }
  GptStage model(config, PartitionStage(config.num_layers, 1, 0));
  const auto parameters = model->named_parameters(/*recurse=*/true);
  for (const auto& [name, tensor] : weights) {
    if (parameters.find(name) == nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          source, " holds parameter ", name, ", which a model of its config has not"));
    }
  }
  RETURN_IF_ERROR(CopyWeightsByName(weights, source, *model));
  model->eval();
  return model;
}

}  // namespace paci
