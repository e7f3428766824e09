#pragma once

// The GPT, cut into pipeline stages. Includes <torch/torch.h>: only worker/
// code includes this header.

#include <cstdint>
#include <string>
#include <utility>

#include <torch/torch.h>

#include "worker/model/partition.h"

#include "worker/model/gpt_config.h"

namespace paci {


// LayerNorm (gpt2: weight and bias) or RMSNorm (llama: weight only), over the
// last dimension, with the config's epsilon. RMSNorm computes as Hugging
// Face's LlamaRMSNorm does: in float32, then back to the input's dtype.
class NormImpl : public torch::nn::Module {
 public:
  explicit NormImpl(const GptConfig& config);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  bool rms_;
  double eps_;
  torch::Tensor weight_, bias_;
};
TORCH_MODULE(Norm);

// The rotary position embedding's cos and sin tables, [positions, head_size]
// each (Hugging Face's rotate-half layout), for positions [start, start + T).
std::pair<torch::Tensor, torch::Tensor> RotaryTables(const GptConfig& config, int64_t start,
                                                     int64_t length, const torch::Device& device);
// x [B, heads, T, head_size] rotated by the tables of its positions.
torch::Tensor ApplyRotary(const torch::Tensor& x, const torch::Tensor& cos,
                          const torch::Tensor& sin);

// Causal multi-head self-attention: LibTorch's fused
// scaled_dot_product_attention (flash or memory-efficient kernels on GPUs).
// One fused projection "qkv" makes the num_heads query heads and the
// num_kv_heads key and value heads (rows in that order); llama rotates the
// queries and keys and shares each key/value head among num_heads /
// num_kv_heads consecutive query heads.
class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  CausalSelfAttentionImpl(const GptConfig& config);
  torch::Tensor forward(const torch::Tensor& x);

 private:
  GptConfig config_;
  torch::nn::Linear qkv_{nullptr}, proj_{nullptr};
};
TORCH_MODULE(CausalSelfAttention);

// Pre-norm transformer block: x + attn(ln1(x)), then x + mlp(ln2(x)); the MLP
// is proj(gelu(fc(x))) (gpt2) or proj(silu(gate) * up) with [gate; up] =
// fc(x) (llama's SwiGLU, the gate's rows first). A stage may hold only one
// half (the partition units "h<b>.attn" and "h<b>.mlp"): it registers only
// that half's modules, under their global names.
class BlockImpl : public torch::nn::Module {
 public:
  BlockImpl(const GptConfig& config, bool attention = true, bool mlp = true);
  torch::Tensor forward(torch::Tensor x);

 private:
  double dropout_;
  bool llama_, has_attention_, has_mlp_;
  Norm ln1_{nullptr}, ln2_{nullptr};
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
  // The last stage's training path: the mean cross-entropy against targets
  // [B, T] of the logits forward() would return, by LinearCrossEntropy (the
  // [B*T, vocab] logits never kept). Requires partition().has_head().
  torch::Tensor Loss(torch::Tensor input, const torch::Tensor& targets);

  const GptConfig& config() const { return config_; }
  const StagePartition& partition() const { return partition_; }
  // "vocab=.. layers=.. d_model=.. heads=.. seq_len=.. blocks=[a,b) emb=. head=.",
  // followed by " units=[u,v)" when the stage ends inside a block; llama's
  // starts "llama kv_heads=.. ffn=.. ".
  std::string Fingerprint() const;

 private:
  void InitParameters();
  // The embedding (if here) and the blocks: forward() without the head.
  torch::Tensor Trunk(torch::Tensor input);

  GptConfig config_;
  StagePartition partition_;
  torch::nn::Embedding wte_{nullptr}, wpe_{nullptr};  // wpe: gpt2 only
  std::vector<Block> blocks_;
  Norm ln_f_{nullptr};
  torch::nn::Linear head_{nullptr};  // no bias, as in GPT-2 and Llama
};
TORCH_MODULE(GptStage);

// Mean cross-entropy of logits [B, T, V] against targets [B, T].
torch::Tensor LanguageModelLoss(const torch::Tensor& logits, const torch::Tensor& targets);

// LanguageModelLoss(hidden W^T, targets) for hidden [N, d], the head's weight
// W [V, d] and targets [N], fused: the logits are made by one matmul (in
// bfloat16 under autocast, as the head's would be) and turned in place, a few
// rows at a time while they sit in the core's cache, into the loss and its
// gradient (softmax - one-hot) / N, which is all the backward keeps of them
// (as Liger-Kernel's fused linear cross-entropy and torchtitan's chunked loss
// avoid the log-softmax's and the one-hot's passes over [N, V]); the backward
// makes the gradients of hidden and W from it by two matmuls. Without
// gradients to compute (no grad mode, or neither input needs one) it computes
// the loss alone. The loss is in float32 whatever the weights.
torch::Tensor LinearCrossEntropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                 const torch::Tensor& targets);

}  // namespace paci
