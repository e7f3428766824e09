#pragma once

// The GPT, cut into pipeline stages. Includes <torch/torch.h>: only worker/
// code includes this header.

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

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
  // With the head split by vocabulary (StagePartition::head_split), the last
  // stage's forward() returns the logits of its rows only; Loss then needs
  // `first_rows`, the weight of the rows the stage before it holds (the
  // evaluation's path: training uses SplitHeadLoss).
  torch::Tensor Loss(torch::Tensor input, const torch::Tensor& targets,
                     const torch::Tensor& first_rows = {});
  // The last stage: the final norm's output [B, T, d], what the head takes.
  torch::Tensor Hidden(torch::Tensor input);
  // The head's rows [first, second) of the vocabulary this stage holds ({0, 0}: none).
  std::pair<int64_t, int64_t> HeadRows() const;
  // The head's weight [rows, d] (undefined without head rows).
  const torch::Tensor& head_weight() const { return head_->weight; }

  // Called as a forward (forward(), Loss(), Hidden()) comes to each piece of
  // the stage, before the piece reads its parameters, with their names: the
  // embedding, each block in turn, then the final norm and the head. Weight
  // prediction (StageModel::Prediction) moves one piece at a time this way.
  // Unset (null): nothing is called.
  using PieceHook = std::function<void(const std::vector<std::string>& parameter_names)>;
  void set_piece_hook(PieceHook hook) { piece_hook_ = std::move(hook); }

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
  // The piece hook's call for pieces_[piece] (a piece without parameters: none).
  void Reading(size_t piece);

  GptConfig config_;
  StagePartition partition_;
  torch::nn::Embedding wte_{nullptr}, wpe_{nullptr};  // wpe: gpt2 only
  std::vector<Block> blocks_;
  Norm ln_f_{nullptr};
  torch::nn::Linear head_{nullptr};  // no bias, as in GPT-2 and Llama
  // The parameters' names of each piece in the forward's order: the
  // embedding, each block, the final norm and the head.
  std::vector<std::vector<std::string>> pieces_;
  PieceHook piece_hook_;
};
TORCH_MODULE(GptStage);

// The names of the token embedding's and the head's weights among a stage's
// parameters (module->named_parameters()).
inline constexpr char kTokenEmbeddingWeight[] = "wte.weight";
inline constexpr char kHeadWeight[] = "head.weight";

// Whether `name` is the head's weight or what AdamW keeps of it
// ("exp_avg/head.weight"): the tensors a split head holds by rows.
bool IsHeadWeight(const std::string& name);
// Of a whole model's tensor `name`, the rows `stage` holds: a split head's
// weight (and its AdamW state) narrowed to HeadRows(); anything else whole.
torch::Tensor StageRowsOf(const GptStageImpl& stage, const std::string& name,
                          const torch::Tensor& whole);

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

// The rows of logits the loss's element-wise passes take at once: 1 MiB of
// float32 (8 rows of a 32,768-word vocabulary), within a core's L2 cache, so
// that they read the rows from the cache rather than memory. The matmuls stay
// whole: smaller ones run slower and read the head's weight again for each
// piece (measured on one thread).
inline constexpr int64_t kLossChunkBytes = int64_t{1} << 20;

// The head split by vocabulary between the last two stages (docs/design.md,
// "The head split by vocabulary"). Each computes its rows' part of the loss
// from the final norm's output, the stage before the last from what the last
// one sends it; the last stage adds the two, and sends back the one number
// per token the other part's weight gradient needs.
//
// One part, for hidden [N, d], its rows' weight W [rows, d] and targets [N]
// (token ids of the whole vocabulary; this part's rows start at row_begin).
// Float32 but for `hidden` and `exps`, in the matmuls' type.
struct HeadShardPart {
  torch::Tensor hidden;         // [N, d], in the matmuls' type
  torch::Tensor lse;            // [N]: log-sum-exp of the part's logits
  torch::Tensor target_logit;   // [N]: the target's logit, 0 where it is another part's
  torch::Tensor exps;           // [N, rows], matmuls' type: exp(logit - the row's max logit)
  torch::Tensor inverse_sum;    // [N]: 1 / the row's sum of exps; the softmax is their product
  torch::Tensor local_targets;  // [N] int64: the target's row in the part (clamped)
  torch::Tensor in_shard;       // [N] bool: the target is one of the part's rows
  torch::Tensor weighted;       // [N, d]: softmax W
  torch::Tensor target_rows;    // [N, d]: W's target row where in_shard, else 0
};
HeadShardPart HeadShardForward(const torch::Tensor& hidden, const torch::Tensor& weight,
                               const torch::Tensor& targets, int64_t row_begin);
// What the stage before the last sends of its part: [N, 2d + 2] float32,
// weighted, target_rows, lse and target_logit side by side.
torch::Tensor PackHeadShard(const HeadShardPart& part);
// The last stage: the mean cross-entropy over the whole vocabulary from its
// own part (`local`, of hidden and weight) and the other's packed one;
// differentiable in hidden and weight as LinearCrossEntropy is.
// `other_scale` gets exp(lse_other - lse) [N], the other part's share of the
// softmax, which its weight gradient needs.
torch::Tensor SplitHeadLoss(const torch::Tensor& hidden, const torch::Tensor& weight,
                            HeadShardPart local, const torch::Tensor& other,
                            torch::Tensor* other_scale);
// The stage before the last: its rows' weight gradient, [rows, d] in
// float32, for the loss scaled by `factor` (1 / (N x accumulation)),
// from the last stage's `scale`.
torch::Tensor HeadShardWeightGradient(const HeadShardPart& part, const torch::Tensor& scale,
                                      double factor);

}  // namespace paci
