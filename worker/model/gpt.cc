#include "worker/model/gpt.h"

#include <cmath>
#include <functional>
#include <limits>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <torch/version.h>

#include "absl/strings/match.h"
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

// A Linear module's layer as ATen's linear, not the C++ frontend's forward:
// the frontend multiplies a [B, T, d] input and then adds the bias in a pass
// of its own, which under bf16 autocast is a float32 bias added into a
// bfloat16 output (rounded twice, with casts both ways in the backward).
// ATen's linear is one addmm with the bias (autocast casts all three once),
// as torch's nn.Linear and Hugging Face run it. In float32 the two differ
// by the order of one addition (1e-6 of the loss after 100 steps). Under
// bf16 autocast, torch's profiler puts the saving at about
// 0.56 ms per [512, 256] x [256, 1024] layer, forward and backward, on one core.
torch::Tensor Linear(const torch::nn::Linear& layer, const torch::Tensor& x) {
  return at::linear(x, layer->weight, layer->bias);  // an undefined bias is none
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
  const auto parts = Linear(qkv_, x).split({H * S, KV * S, KV * S}, -1);
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
  return torch::dropout(Linear(proj_, y), config_.dropout, is_training());
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
    torch::Tensor h = Linear(fc_, ln2_(x));
    if (llama_) {
      const auto gate_up = h.chunk(2, -1);
      h = torch::silu(gate_up[0]) * gate_up[1];
    } else {
      h = torch::gelu(h);
    }
    x = x + torch::dropout(Linear(proj_, h), dropout_, is_training());
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
  if (partition.has_head()) ln_f_ = register_module("ln_f", Norm(config));
  if (partition.has_head() || partition.has_head_shard()) {
    head_ = register_module("head", torch::nn::Linear(torch::nn::LinearOptions(
                                                          config.d_model, HeadRows().second -
                                                                              HeadRows().first)
                                                          .bias(false)));
  }
  InitParameters();
  // The pieces, by the modules' registered names.
  const auto names_under = [this](const std::vector<std::string>& children) {
    std::vector<std::string> names;
    for (const auto& item : named_parameters(/*recurse=*/true)) {
      for (const std::string& child : children) {
        if (absl::StartsWith(item.key(), child + ".")) names.push_back(item.key());
      }
    }
    return names;
  };
  pieces_.push_back(names_under({"wte", "wpe"}));
  for (int b = partition.first_block(); b < partition.end_block(); ++b) {
    pieces_.push_back(names_under({absl::StrCat("h", b)}));
  }
  pieces_.push_back(names_under({"ln_f", "head"}));
}

void GptStageImpl::Reading(size_t piece) {
  if (piece_hook_ && !pieces_[piece].empty()) piece_hook_(pieces_[piece]);
}

std::pair<int64_t, int64_t> GptStageImpl::HeadRows() const {
  if (partition_.head_split()) return {partition_.head_row_begin, partition_.head_row_end};
  if (partition_.has_head()) return {0, config_.vocab_size};
  return {0, 0};
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
      if (name == "head.weight" && partition_.head_split()) {
        // This stage's rows of the whole head's draw.
        const auto [begin, end] = HeadRows();
        p.copy_(at::normal(0.0, std, {config_.vocab_size, config_.d_model}, gen,
                           torch::dtype(p.dtype()))
                    .narrow(0, begin, end - begin));
        continue;
      }
      p.copy_(at::normal(0.0, std, p.sizes(), gen, torch::dtype(p.dtype())));
    }
  }
}

torch::Tensor GptStageImpl::forward(torch::Tensor x) {
  x = Trunk(std::move(x));
  if (partition_.has_head()) {
    Reading(pieces_.size() - 1);
    x = Linear(head_, ln_f_(x));
  }
  return x;
}

torch::Tensor GptStageImpl::Loss(torch::Tensor x, const torch::Tensor& targets,
                                 const torch::Tensor& first_rows) {
  const torch::Tensor hidden = Hidden(std::move(x));
  const torch::Tensor weight =
      first_rows.defined() ? torch::cat({first_rows.to(head_->weight.scalar_type()), head_->weight})
                           : head_->weight;
  return LinearCrossEntropy(hidden.reshape({-1, hidden.size(-1)}), weight, targets.reshape({-1}));
}

torch::Tensor GptStageImpl::Hidden(torch::Tensor x) {
  x = Trunk(std::move(x));
  Reading(pieces_.size() - 1);
  return ln_f_(x);
}

torch::Tensor GptStageImpl::Trunk(torch::Tensor x) {
  if (partition_.has_embedding()) {
    Reading(0);
    if (config_.llama()) {
      x = wte_(x);
    } else {
      x = wte_(x) + wpe_(torch::arange(x.size(1), torch::dtype(torch::kLong).device(x.device())));
    }
    x = torch::dropout(x, config_.dropout, is_training());
  }
  for (size_t b = 0; b < blocks_.size(); ++b) {
    Reading(1 + b);
    x = blocks_[b](x);
  }
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
                                         partition_.end_unit, ")"),
                      partition_.head_split()
                          ? absl::StrCat(" head_rows=[", partition_.head_row_begin, ",",
                                         partition_.head_row_end, ")")
                          : "");
}

bool IsHeadWeight(const std::string& name) {
  const size_t slash = name.find('/');
  return (slash == std::string::npos ? name : name.substr(slash + 1)) == kHeadWeight;
}

torch::Tensor StageRowsOf(const GptStageImpl& stage, const std::string& name,
                          const torch::Tensor& whole) {
  if (!stage.partition().head_split() || !IsHeadWeight(name) || whole.dim() != 2 ||
      whole.size(0) != stage.config().vocab_size) {
    return whole;
  }
  const auto [begin, end] = stage.HeadRows();
  return whole.narrow(0, begin, end - begin);
}

torch::Tensor LanguageModelLoss(const torch::Tensor& logits, const torch::Tensor& targets) {
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}),
                                              targets.reshape({-1}));
}

namespace {

// The matmuls' type of the head's loss: bfloat16 under autocast (as the
// head's Linear would run), else the weights'.
torch::ScalarType MatmulType(const torch::Tensor& hidden, const torch::Tensor& weight) {
  return at::autocast::is_autocast_enabled(hidden.device().type())
             ? at::autocast::get_autocast_dtype(hidden.device().type())
             : weight.scalar_type();
}

// Rows x [n, V] of logits, in place: exp(logit - the row's max), one exp an
// element (log_softmax and an exp after it take two). `lse` [n] gets the rows'
// log-sum-exp and `inverse_sum` [n] the inverse of their sums of exps, so that
// the softmax is x * inverse_sum.
void ExpRows(torch::Tensor x, torch::Tensor lse, torch::Tensor inverse_sum) {
  const torch::Tensor max = x.amax({1}, true);
  x.sub_(max).exp_();
  at::sum_out(inverse_sum, x, {1});
  at::log_out(lse, inverse_sum).add_(max.squeeze(1));
  inverse_sum.reciprocal_();
}

// The rows of logits the loss's element-wise passes take at once
// (kLossChunkBytes of float32, at least one).
int64_t ChunkRows(int64_t columns) {
  return std::max<int64_t>(1, kLossChunkBytes / (columns * int64_t{sizeof(float)}));
}

class LinearCrossEntropyFunction
    : public torch::autograd::Function<LinearCrossEntropyFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& hidden,
                               const torch::Tensor& weight, const torch::Tensor& targets,
                               bool gradients) {
    const int64_t N = hidden.size(0), V = weight.size(0);
    // The casts are the ones autocast would make.
    const torch::ScalarType compute = MatmulType(hidden, weight);
    const torch::Tensor h = hidden.to(compute), w = weight.to(compute);
    torch::Tensor logits = torch::mm(h, w.t());
    if (logits.scalar_type() != torch::kFloat) logits = logits.to(torch::kFloat);
    const int64_t rows = ChunkRows(V);
    const torch::Tensor target_logits = logits.gather(1, targets.unsqueeze(1)).squeeze(1);
    torch::Tensor losses = torch::empty({N}, logits.options());
    torch::Tensor inverse_sum = torch::empty({N}, logits.options());
    const double inverse_n = 1.0 / static_cast<double>(N);
    const torch::Tensor minus_inverse_n =
        torch::full({std::min(rows, N), 1}, -inverse_n, logits.options());
    for (int64_t start = 0; start < N; start += rows) {
      const int64_t n = std::min(rows, N - start);
      torch::Tensor x = logits.narrow(0, start, n);
      torch::Tensor inverse = inverse_sum.narrow(0, start, n);
      ExpRows(x, losses.narrow(0, start, n), inverse);
      if (!gradients) continue;
      // The loss's gradient in the logits' place: (softmax - one-hot) / N.
      x.mul_(inverse.mul(inverse_n).unsqueeze(1));
      x.scatter_add_(1, targets.narrow(0, start, n).unsqueeze(1),
                     minus_inverse_n.narrow(0, 0, n));
    }
    losses.sub_(target_logits);
    if (gradients) {
      // The backward computes the two matmuls from these, in the forward's type.
      ctx->save_for_backward({logits.to(compute), h, w});
      ctx->saved_data["hidden_type"] = static_cast<int64_t>(hidden.scalar_type());
      ctx->saved_data["weight_type"] = static_cast<int64_t>(weight.scalar_type());
    }
    return losses.sum() * inverse_n;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const torch::autograd::variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &grad_logits = saved[0], &h = saved[1], &w = saved[2];
    const torch::Tensor& scale = grad_outputs[0];  // a 0-dim tensor: the caller's factor
    const auto type = [&](const char* key) {
      return static_cast<torch::ScalarType>(ctx->saved_data[key].toInt());
    };
    const torch::Tensor grad_hidden = torch::mm(grad_logits, w).to(type("hidden_type"));
    grad_hidden.mul_(scale);
    // The factor on h [N, d], not on the weight's gradient [V, d]: a pass the smaller.
    const torch::Tensor grad_weight = torch::mm(grad_logits.t(), h * scale).to(type("weight_type"));
    return {grad_hidden, grad_weight, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor LinearCrossEntropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                 const torch::Tensor& targets) {
  const bool gradients =
      torch::GradMode::is_enabled() && (hidden.requires_grad() || weight.requires_grad());
  return LinearCrossEntropyFunction::apply(hidden, weight, targets, gradients);
}

namespace {

// The weight gradient of a part of the head, [rows, d] in float32, for the
// logits' gradient (row_scale * exps - one-hot * target_scale) [N, rows]
// without making it: the rows' scales go on hidden [N, d] instead of on the
// part's exps [N, rows] (exps^T (row_scale hidden)), and the one-hot adds the
// target rows of hidden, which saves a pass over the exps.
torch::Tensor PartWeightGradient(const torch::Tensor& exps, const torch::Tensor& hidden,
                                 const torch::Tensor& row_scale,
                                 const torch::Tensor& local_targets,
                                 const torch::Tensor& target_scale) {
  torch::NoGradGuard no_grad;
  const torch::Tensor h = hidden.to(torch::kFloat);
  const torch::Tensor scaled = (h * row_scale.unsqueeze(1)).to(hidden.scalar_type());
  torch::Tensor gradient = torch::mm(exps.t(), scaled).to(torch::kFloat);
  gradient.index_add_(0, local_targets, h * target_scale.unsqueeze(1).neg());
  return gradient;
}

// The loss of a split head on the last stage, worked out in the forward
// (SplitHeadLoss): the backward scales the hidden state's gradient and makes
// the weight's from the part's exps by one matmul.
class PrecomputedLossFunction : public torch::autograd::Function<PrecomputedLossFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& hidden,
                               const torch::Tensor& weight, const torch::Tensor& loss,
                               const torch::Tensor& grad_hidden, const torch::Tensor& exps,
                               const torch::Tensor& compute_hidden, const torch::Tensor& row_scale,
                               const torch::Tensor& local_targets,
                               const torch::Tensor& target_scale) {
    ctx->save_for_backward(
        {grad_hidden, exps, compute_hidden, row_scale, local_targets, target_scale});
    ctx->saved_data["hidden_type"] = static_cast<int64_t>(hidden.scalar_type());
    ctx->saved_data["weight_type"] = static_cast<int64_t>(weight.scalar_type());
    return loss.clone();
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const torch::autograd::variable_list saved = ctx->get_saved_variables();
    const torch::Tensor& scale = grad_outputs[0];
    const auto type = [&](const char* key) {
      return static_cast<torch::ScalarType>(ctx->saved_data[key].toInt());
    };
    torch::Tensor grad_hidden = (saved[0] * scale).to(type("hidden_type"));
    // The factor on the rows' scales, not on the weight's gradient [rows, d].
    const torch::Tensor grad_weight =
        PartWeightGradient(saved[1], saved[2], saved[3] * scale, saved[4], saved[5] * scale);
    return {grad_hidden, grad_weight.to(type("weight_type")),
            torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(),
            torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

HeadShardPart HeadShardForward(const torch::Tensor& hidden, const torch::Tensor& weight,
                               const torch::Tensor& targets, int64_t row_begin) {
  torch::NoGradGuard no_grad;
  const int64_t N = hidden.size(0), rows = weight.size(0);
  const torch::ScalarType compute = MatmulType(hidden, weight);
  HeadShardPart part;
  part.hidden = hidden.to(compute);
  const torch::Tensor w = weight.to(compute);
  torch::Tensor exps = torch::mm(part.hidden, w.t());
  if (exps.scalar_type() != torch::kFloat) exps = exps.to(torch::kFloat);
  const torch::Tensor local = targets - row_begin;
  part.in_shard = local.ge(0).logical_and(local.lt(rows));
  part.local_targets = local.clamp(0, rows - 1);
  part.target_logit =
      exps.gather(1, part.local_targets.unsqueeze(1)).squeeze(1).mul(part.in_shard);
  part.lse = torch::empty({N}, exps.options());
  part.inverse_sum = torch::empty({N}, exps.options());
  // A few rows at a time, while they sit in the core's cache (as LinearCrossEntropy).
  const int64_t chunk = ChunkRows(rows);
  for (int64_t start = 0; start < N; start += chunk) {
    const int64_t n = std::min(chunk, N - start);
    ExpRows(exps.narrow(0, start, n), part.lse.narrow(0, start, n),
            part.inverse_sum.narrow(0, start, n));
  }
  part.exps = exps.to(compute);  // what the two matmuls read, made once
  part.weighted = torch::mm(part.exps, w).to(torch::kFloat);
  part.weighted.mul_(part.inverse_sum.unsqueeze(1));
  part.target_rows =
      w.index_select(0, part.local_targets).to(torch::kFloat).mul_(part.in_shard.unsqueeze(1));
  return part;
}

torch::Tensor PackHeadShard(const HeadShardPart& part) {
  return torch::cat({part.weighted, part.target_rows, part.lse.unsqueeze(1),
                     part.target_logit.unsqueeze(1)},
                    1);
}

torch::Tensor SplitHeadLoss(const torch::Tensor& hidden, const torch::Tensor& weight,
                            HeadShardPart local, const torch::Tensor& other,
                            torch::Tensor* other_scale) {
  torch::Tensor grad_hidden, loss, own;
  {
    torch::NoGradGuard no_grad;
    const int64_t N = hidden.size(0), d = hidden.size(1);
    const torch::Tensor other_weighted = other.narrow(1, 0, d);
    const torch::Tensor other_rows = other.narrow(1, d, d);
    const torch::Tensor other_lse = other.select(1, 2 * d);
    const torch::Tensor other_logit = other.select(1, 2 * d + 1);
    const torch::Tensor lse = torch::logaddexp(local.lse, other_lse);
    loss = (lse - local.target_logit - other_logit).sum() / static_cast<double>(N);
    own = (local.lse - lse).exp_();
    *other_scale = (other_lse - lse).exp_();
    // d loss / d hidden, summed over both parts of the vocabulary.
    grad_hidden = (local.weighted * own.unsqueeze(1) - local.target_rows +
                   other_weighted * other_scale->unsqueeze(1) - other_rows)
                      .div_(static_cast<double>(N));
  }
  // d loss / d logits of this part, (own softmax - one-hot) / N, is made in the backward.
  const double inverse_n = 1.0 / static_cast<double>(hidden.size(0));
  return PrecomputedLossFunction::apply(
      hidden, weight, loss, grad_hidden, local.exps, local.hidden,
      own * local.inverse_sum * inverse_n, local.local_targets,
      local.in_shard.to(torch::kFloat) * inverse_n);
}

torch::Tensor HeadShardWeightGradient(const HeadShardPart& part, const torch::Tensor& scale,
                                      double factor) {
  return PartWeightGradient(part.exps, part.hidden,
                            scale * part.inverse_sum * factor, part.local_targets,
                            part.in_shard.to(torch::kFloat) * factor);
}

}  // namespace paci
