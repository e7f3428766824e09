#pragma once

// Hugging Face's model folder, in and out: config.json, model.safetensors (or
// shards model-0000k-of-0000n.safetensors with model.safetensors.index.json),
// generation_config.json and the tokenizer's files. gpt2 leaves as
// GPT2LMHeadModel, llama as LlamaForCausalLM, each with the settings that
// reproduce paci's forward (exact GELU, the norm epsilon, untied head, rope
// base); either comes back in as a paci model of any cut. Includes Torch:
// worker/ code only.

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/data/tokenizer.h"
#include "worker/model/gpt_config.h"
#include "worker/model/gpt_weights.h"

namespace paci {

// config.json's text for `config`.
std::string HfConfigJson(const GptConfig& config);

// The shape config.json describes: model_type "gpt2" or "llama" (Hugging
// Face's defaults for what it leaves out). InvalidArgument naming `what` and
// the key when it is malformed, or describes a model paci does not build
// (another model_type, another activation, rope scaling, biases on llama,
// a head_dim other than hidden_size / num_attention_heads).
absl::StatusOr<GptConfig> GptConfigFromHfConfig(const std::string& text, const std::string& what);

// paci's weights (global names, the whole model) under Hugging Face's names
// and layouts (GPT-2's Conv1D matrices transposed, llama's fused q/k/v and
// gate/up split), float32, contiguous, on the CPU. FailedPrecondition naming
// a parameter paci's model should have and `weights` lacks.
absl::StatusOr<NamedWeights> ToHfWeights(const GptConfig& config, const NamedWeights& weights);

// The reverse: Hugging Face's tensors to paci's names. A missing lm_head is
// the tied embedding (copied: paci's head is its own parameter). Names paci
// has no use for (GPT-2's attention-mask buffers, llama's rotary inv_freq)
// are skipped; a missing tensor or one of another shape is FailedPrecondition
// naming it and `what`.
absl::StatusOr<NamedWeights> FromHfWeights(const GptConfig& config, const NamedWeights& hf,
                                           const std::string& what);

struct HfExportOptions {
  // A shard holds at most this many bytes of tensors (one tensor larger
  // than this gets a shard of its own); more than one shard writes
  // model.safetensors.index.json beside them.
  int64_t max_shard_bytes = int64_t{5} << 30;
};

// Writes `weights` (paci's, the whole model) of `config` with `tokenizer` as
// a Hugging Face model folder `folder` (created; files in it replaced, each
// written atomically). The tokenizer: a character tokenizer becomes
// tokenizer.json (a BPE of single characters without merges, which
// Hugging Face's tokenizers library encodes to paci's ids); a SentencePiece
// one its tokenizer.model; a tokenizer.json (prepare-data --tokenizer_json)
// itself, as it was given. Unavailable naming the file that cannot be written.
absl::Status WriteHfFolder(const GptConfig& config, const NamedWeights& weights,
                           const Tokenizer& tokenizer, const std::string& folder,
                           const HfExportOptions& options = {});

// Whether `path` is a Hugging Face model folder (holds config.json).
bool IsHfFolder(const std::string& path);

struct HfModel {
  GptConfig config;
  NamedWeights weights;  // paci's names, the whole model, float32
};

// Reads a Hugging Face model folder of either architecture: config.json and
// model.safetensors or the shards its index names. The errors of
// GptConfigFromHfConfig, ParseSafetensors and FromHfWeights, and NotFound
// naming a file that is missing.
absl::StatusOr<HfModel> ReadHfFolder(const std::string& folder);

}  // namespace paci
