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

NormImpl::NormImpl(const GptConfig& c) : rms_(c.llama()), eps_(c.norm_eps) {
  weight_ = register_parameter("weight", torch::ones({c.d_model}));
  if (!rms_) bias_ = register_parameter("bias", torch::zeros({c.d_model}));
}

torch::Tensor NormImpl::forward(const torch::Tensor& x) {
  if (!rms_) return torch::layer_norm(x, {x.size(-1)}, weight_, bias_, eps_);
  const torch::Tensor x32 = x.to(torch::kFloat);
  const torch::Tensor normed = x32 * torch::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps_);
  return weight_ * normed.to(x.scalar_type());
}

std::pair<torch::Tensor, torch::Tensor> RotaryTables(const GptConfig& c, int64_t start,
                                                     int64_t length, const torch::Device& device) {
  const int64_t half = c.head_size() / 2;
  const auto options = torch::dtype(torch::kFloat).device(device);
  // inv_freq[i] = theta^(-2i / head_size), as Hugging Face's default rope.
  const torch::Tensor inv_freq =
      1.0 / torch::pow(c.rope_theta, torch::arange(0, 2 * half, 2, options) / (2.0 * half));
  const torch::Tensor positions = torch::arange(start, start + length, options);
  const torch::Tensor freqs = torch::outer(positions, inv_freq);
  const torch::Tensor angles = torch::cat({freqs, freqs}, -1);
  return {angles.cos(), angles.sin()};
}

torch::Tensor ApplyRotary(const torch::Tensor& x, const torch::Tensor& cos,
                          const torch::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  const torch::Tensor rotated =
      torch::cat({-x.narrow(-1, half, half), x.narrow(-1, 0, half)}, -1);
  return (x * cos.to(x.scalar_type()) + rotated * sin.to(x.scalar_type()));
}

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const GptConfig& c) : config_(c) {
  const bool bias = !c.llama();
  const int64_t kv_width = int64_t{c.kv_heads()} * c.head_size();
  qkv_ = register_module("qkv", torch::nn::Linear(torch::nn::LinearOptions(
                                                      c.d_model, c.d_model + 2 * kv_width)
                                                      .bias(bias)));
  proj_ = register_module(
      "proj", torch::nn::Linear(torch::nn::LinearOptions(c.d_model, c.d_model).bias(bias)));
}

torch::Tensor CausalSelfAttentionImpl::forward(const torch::Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), D = x.size(2);
  const int64_t H = config_.num_heads, KV = config_.kv_heads(), S = config_.head_size();
  const auto parts = qkv_(x).split({H * S, KV * S, KV * S}, -1);
  auto q = parts[0].view({B, T, H, S}).transpose(1, 2);  // [B, H, T, S]
  auto k = parts[1].view({B, T, KV, S}).transpose(1, 2);
  auto v = parts[2].view({B, T, KV, S}).transpose(1, 2);
  if (config_.llama()) {
    const auto [cos, sin] = RotaryTables(config_, 0, T, x.device());
    q = ApplyRotary(q, cos, sin);
    k = ApplyRotary(k, cos, sin);
    if (KV != H) {
      k = k.repeat_interleave(H / KV, 1);
      v = v.repeat_interleave(H / KV, 1);
    }
  }
  const double dropout = is_training() ? config_.dropout : 0.0;
  auto y = at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, dropout, /*is_causal=*/true);
  y = y.transpose(1, 2).contiguous().view({B, T, D});
  return torch::dropout(proj_(y), config_.dropout, is_training());
}

BlockImpl::BlockImpl(const GptConfig& c, bool attention, bool mlp)
    : dropout_(c.dropout), llama_(c.llama()), has_attention_(attention), has_mlp_(mlp) {
  if (attention) {
    ln1_ = register_module("ln1", Norm(c));
    attn_ = register_module("attn", CausalSelfAttention(c));
  }
  if (mlp) {
    const int64_t F = c.ffn();
    ln2_ = register_module("ln2", Norm(c));
    fc_ = register_module("fc", torch::nn::Linear(torch::nn::LinearOptions(
                                                      c.d_model, llama_ ? 2 * F : F)
                                                      .bias(!llama_)));
    proj_ = register_module(
        "proj", torch::nn::Linear(torch::nn::LinearOptions(F, c.d_model).bias(!llama_)));
  }
}

torch::Tensor BlockImpl::forward(torch::Tensor x) {
  if (has_attention_) x = x + attn_(ln1_(x));
  if (has_mlp_) {
    torch::Tensor h = fc_(ln2_(x));
    if (llama_) {
      const auto gate_up = h.chunk(2, -1);
      h = torch::silu(gate_up[0]) * gate_up[1];
    } else {
      h = torch::gelu(h);
    }
    x = x + torch::dropout(proj_(h), dropout_, is_training());
  }
  return x;
}

GptStageImpl::GptStageImpl(const GptConfig& config, const StagePartition& partition)
    : config_(config), partition_(partition) {
  if (partition.has_embedding()) {
    wte_ = register_module("wte", torch::nn::Embedding(config.vocab_size, config.d_model));
    if (!config.llama()) {
      wpe_ = register_module("wpe", torch::nn::Embedding(config.seq_len, config.d_model));
    }
  }
  for (int b = partition.first_block(); b < partition.end_block(); ++b) {
    blocks_.push_back(register_module(
        absl::StrCat("h", b), Block(config, partition.has_attention(b), partition.has_mlp(b))));
  }
  if (partition.has_head()) {
    ln_f_ = register_module("ln_f", Norm(config));
    head_ = register_module("head", torch::nn::Linear(torch::nn::LinearOptions(
                                                          config.d_model, config.vocab_size)
                                                          .bias(false)));
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
    if (config_.llama()) {
      x = wte_(x);
    } else {
      x = wte_(x) + wpe_(torch::arange(x.size(1), torch::dtype(torch::kLong).device(x.device())));
    }
    x = torch::dropout(x, config_.dropout, is_training());
  }
  for (auto& block : blocks_) x = block(x);
  if (partition_.has_head()) x = head_(ln_f_(x));
  return x;
}

std::string GptStageImpl::Fingerprint() const {
  const std::string architecture =
      config_.llama() ? absl::StrCat("llama kv_heads=", config_.kv_heads(),
                                     " ffn=", config_.ffn(), " ")
                      : (config_.ffn() == 4 * config_.d_model
                             ? ""
                             : absl::StrCat("ffn=", config_.ffn(), " "));
  return absl::StrCat(architecture, "vocab=", config_.vocab_size, " layers=", config_.num_layers,
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
