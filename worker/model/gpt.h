#pragma once

// The GPT, cut into pipeline stages. Includes <torch/torch.h>: only worker/
// code includes this header.

#include <cstdint>
#include <string>

#include <torch/torch.h>

#include "worker/model/partition.h"

#include "worker/model/gpt_config.h"

namespace paci {


// Causal multi-head self-attention: LibTorch's fused
// scaled_dot_product_attention (flash or memory-efficient kernels on GPUs).
class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  CausalSelfAttentionImpl(const GptConfig& config);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  int num_heads_;
  double dropout_;
  torch::nn::Linear qkv_{nullptr}, proj_{nullptr};
};
TORCH_MODULE(CausalSelfAttention);

// Pre-LN transformer block: x + attn(ln1(x)), then x + mlp(ln2(x)) with GELU.
// A stage may hold only one half (the partition units "h<b>.attn" and
// "h<b>.mlp"): it registers only that half's modules, under their global names.
class BlockImpl : public torch::nn::Module {
 public:
  BlockImpl(const GptConfig& config, bool attention = true, bool mlp = true);
  torch::Tensor forward(torch::Tensor x);

 private:
  double dropout_;
  bool has_attention_, has_mlp_;
  torch::nn::LayerNorm ln1_{nullptr}, ln2_{nullptr};
  CausalSelfAttention attn_{nullptr};
  torch::nn::Linear fc_{nullptr}, proj_{nullptr};
};
TORCH_MODULE(Block);

// One pipeline stage of the GPT. Parameter names are global ("h3.attn.qkv.weight"
// names block 3 on whichever stage holds it) and each parameter is initialised
// from a generator seeded by (init_seed, name), so a P-stage model has exactly
// the weights of the unsplit one (P = 1).
//
// forward(): the first stage takes token ids [B, T] (int64), the others the
// hidden state [B, T, d_model]; the last stage returns logits [B, T, vocab],
// the others the hidden state. Not thread-safe.
class GptStageImpl : public torch::nn::Module {
 public:
  GptStageImpl(const GptConfig& config, const StagePartition& partition);
  torch::Tensor forward(torch::Tensor input);

  const GptConfig& config() const { return config_; }
  const StagePartition& partition() const { return partition_; }
  // "vocab=.. layers=.. d_model=.. heads=.. seq_len=.. blocks=[a,b) emb=. head=.",
  // followed by " units=[u,v)" when the stage ends inside a block.
  std::string Fingerprint() const;

 private:
  void InitParameters();

  GptConfig config_;
  StagePartition partition_;
  torch::nn::Embedding wte_{nullptr}, wpe_{nullptr};
  std::vector<Block> blocks_;
  torch::nn::LayerNorm ln_f_{nullptr};
  torch::nn::Linear head_{nullptr};
};
TORCH_MODULE(GptStage);

// Mean cross-entropy of logits [B, T, V] against targets [B, T].
torch::Tensor LanguageModelLoss(const torch::Tensor& logits, const torch::Tensor& targets);

}  // namespace paci
