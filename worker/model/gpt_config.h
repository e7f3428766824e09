#pragma once

// The model's shape, one type for the module (gpt.h), its checkpoints, the
// cost model (partition.h) and the tools; no Torch.

#include <cstdint>
#include <optional>
#include <string>

#include "paci/v1/job.pb.h"

namespace paci {

// model.architecture. kGpt2: pre-LayerNorm blocks with biases, a GELU MLP of
// two matrices and learned positions (GPT-2's). kLlama: RMSNorm, rotary
// positions, a SwiGLU MLP of three matrices, grouped-query attention and no
// biases (Llama's).
enum class Architecture { kGpt2, kLlama };
// "gpt2" or "llama".
const char* ArchitectureName(Architecture architecture);

// runtime.precision (ResolvePlacement in precision.h parses it).
enum class Precision {
  kFp32,          // everything in float32
  kBf16Autocast,  // matmuls in bfloat16 under autocast; weights and optimizer in float32
  kBf16Weights,   // weights, activations and gradients in bfloat16; float32 master weights
};

struct GptConfig {
  Architecture architecture = Architecture::kGpt2;
  int vocab_size = 96;
  int num_layers = 4;
  int d_model = 128;
  int num_heads = 4;
  int num_kv_heads = 0;     // 0: num_heads (always, for gpt2); kv_heads() says
  int ffn_hidden_size = 0;  // the MLP's hidden width; 0: the architecture's default; ffn() says
  int seq_len = 64;
  double rope_theta = 10000;  // llama
  double norm_eps = 1e-5;
  double dropout = 0.0;
  uint64_t init_seed = 1234;

  bool llama() const { return architecture == Architecture::kLlama; }
  int head_size() const { return d_model / num_heads; }
  int kv_heads() const { return num_kv_heads > 0 ? num_kv_heads : num_heads; }
  // ffn_hidden_size, or DefaultFfnHiddenSize (common/job_spec.h) when 0.
  int ffn() const;
};

// The shape a job spec gives, its defaults filled in as ApplyJobSpecDefaults
// fills them.
GptConfig GptConfigFromSpec(const v1::ModelSpec& model);

// The first field of the shape (everything but dropout and init_seed) in
// which `there` differs from `here`: "model.d_model is 64 there, 128 here";
// nullopt when both have the same shape.
std::optional<std::string> ShapeDifference(const GptConfig& here, const GptConfig& there);

}  // namespace paci
