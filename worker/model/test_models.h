#pragma once

// The small models the worker's tests and fuzzers build, in one place: a GPT
// of a given shape, and the llama of the same size. Header only; no Torch.

#include "worker/model/gpt_config.h"

namespace paci {

// vocab_size, num_layers, d_model, num_heads and seq_len of a GPT-2; every
// other field as GptConfig defaults it.
struct TinyShape {
  int vocab_size, num_layers, d_model, num_heads, seq_len;
};

inline GptConfig TinyGpt(const TinyShape& shape) {
  GptConfig c;
  c.vocab_size = shape.vocab_size;
  c.num_layers = shape.num_layers;
  c.d_model = shape.d_model;
  c.num_heads = shape.num_heads;
  c.seq_len = shape.seq_len;
  return c;
}

// `gpt` as a llama: grouped-query attention (2 key/value heads), a SwiGLU MLP
// of width 24, RMSNorm and a rotary base that is not the default (500).
inline GptConfig TinyLlama(GptConfig gpt) {
  gpt.architecture = Architecture::kLlama;
  gpt.num_kv_heads = 2;
  gpt.ffn_hidden_size = 24;
  gpt.rope_theta = 500;
  return gpt;
}

}  // namespace paci
