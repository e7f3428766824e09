#include "worker/model/gpt.h"

#include <cmath>
#include <functional>
#include <limits>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/version.h>

#include "absl/strings/str_cat.h"

namespace paci {
namespace {

uint64_t Mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t SeedFor(uint64_t seed, const std::string& name) {
  uint64_t h = Mix(seed);
  for (unsigned char c : name) h = Mix(h ^ c);
  return h;
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const GptConfig& c)
    : num_heads_(c.num_heads), dropout_(c.dropout) {
  qkv_ = register_module("qkv", torch::nn::Linear(c.d_model, 3 * c.d_model));
  proj_ = register_module("proj", torch::nn::Linear(c.d_model, c.d_model));
}

torch::Tensor CausalSelfAttentionImpl::forward(const torch::Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), D = x.size(2), H = num_heads_;
  auto qkv = qkv_(x).view({B, T, 3, H, D / H}).permute({2, 0, 3, 1, 4});
  auto q = qkv[0], k = qkv[1], v = qkv[2];  // [B, H, T, D/H]
  auto y = at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{},
                                            is_training() ? dropout_ : 0.0, /*is_causal=*/true);
  y = y.transpose(1, 2).contiguous().view({B, T, D});
  return torch::dropout(proj_(y), dropout_, is_training());
}

BlockImpl::BlockImpl(const GptConfig& c, bool attention, bool mlp)
    : dropout_(c.dropout), has_attention_(attention), has_mlp_(mlp) {
  if (attention) {
    ln1_ = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.d_model})));
    attn_ = register_module("attn", CausalSelfAttention(c));
  }
  if (mlp) {
    ln2_ = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.d_model})));
    fc_ = register_module("fc", torch::nn::Linear(c.d_model, 4 * c.d_model));
    proj_ = register_module("proj", torch::nn::Linear(4 * c.d_model, c.d_model));
  }
}

torch::Tensor BlockImpl::forward(torch::Tensor x) {
  if (has_attention_) x = x + attn_(ln1_(x));
  if (has_mlp_) x = x + torch::dropout(proj_(torch::gelu(fc_(ln2_(x)))), dropout_, is_training());
  return x;
}

GptStageImpl::GptStageImpl(const GptConfig& config, const StagePartition& partition)
    : config_(config), partition_(partition) {
  if (partition.has_embedding()) {
    wte_ = register_module("wte", torch::nn::Embedding(config.vocab_size, config.d_model));
    wpe_ = register_module("wpe", torch::nn::Embedding(config.seq_len, config.d_model));
  }
  for (int b = partition.first_block(); b < partition.end_block(); ++b) {
    blocks_.push_back(register_module(
        absl::StrCat("h", b), Block(config, partition.has_attention(b), partition.has_mlp(b))));
  }
  if (partition.has_head()) {
    ln_f_ = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({config.d_model})));
    head_ = register_module("head", torch::nn::Linear(config.d_model, config.vocab_size));
  }
  InitParameters();
}

void GptStageImpl::InitParameters() {
  // GPT-2's scheme: N(0, 0.02) for matrices and embeddings, scaled by
  // 1/sqrt(2 * layers) on the residual projections; zero biases; unit LN gains.
  torch::NoGradGuard no_grad;
  const double residual_std = 0.02 / std::sqrt(2.0 * config_.num_layers);
  for (auto& item : named_parameters(/*recurse=*/true)) {
    const std::string& name = item.key();
    torch::Tensor p = item.value();
    if (name.find("ln") != std::string::npos) {
      p.fill_(EndsWith(name, ".weight") ? 1.0 : 0.0);
    } else if (EndsWith(name, ".bias")) {
      p.zero_();
    } else {
      auto gen = at::make_generator<at::CPUGeneratorImpl>(SeedFor(config_.init_seed, name));
      const double std = EndsWith(name, "proj.weight") ? residual_std : 0.02;
      p.copy_(at::normal(0.0, std, p.sizes(), gen, torch::dtype(p.dtype())));
    }
  }
}

torch::Tensor GptStageImpl::forward(torch::Tensor x) {
  if (partition_.has_embedding()) {
    auto positions = torch::arange(x.size(1), torch::dtype(torch::kLong).device(x.device()));
    x = wte_(x) + wpe_(positions);
    x = torch::dropout(x, config_.dropout, is_training());
  }
  for (auto& block : blocks_) x = block(x);
  if (partition_.has_head()) x = head_(ln_f_(x));
  return x;
}

std::string GptStageImpl::Fingerprint() const {
  return absl::StrCat("vocab=", config_.vocab_size, " layers=", config_.num_layers,
                      " d_model=", config_.d_model, " heads=", config_.num_heads,
                      " seq_len=", config_.seq_len, " blocks=[", partition_.first_block(), ",",
                      partition_.end_block(), ") emb=", partition_.has_embedding(),
                      " head=", partition_.has_head(),
                      partition_.WholeBlocks()
                          ? ""
                          : absl::StrCat(" units=[", partition_.first_unit, ",",
                                         partition_.end_unit, ")"));
}

torch::Tensor LanguageModelLoss(const torch::Tensor& logits, const torch::Tensor& targets) {
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}),
                                              targets.reshape({-1}));
}

}  // namespace paci
