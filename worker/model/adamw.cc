#include "worker/model/adamw.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include <torch/version.h>

namespace paci {
namespace {

// dst[i].copy_(src[i]) for every i, in one multi-tensor kernel (it converts
// the dtype too).
void CopyAll(const std::vector<torch::Tensor>& dst, const std::vector<torch::Tensor>& src) {
  if (dst.empty()) return;
  at::_foreach_copy_(dst, src);
}

}  // namespace

AdamW::AdamW(std::vector<std::pair<std::string, torch::Tensor>> named_parameters,
             const AdamWOptions& options)
    : options_(options), params_(std::move(named_parameters)) {
  for (auto& [name, p] : params_) {
    torch::Tensor master;
    if (p.scalar_type() != torch::kFloat) master = p.detach().to(torch::kFloat).clone();
    master_.push_back(master);
    master_grad_.push_back(master.defined() ? torch::empty_like(master) : torch::Tensor());
    const torch::Tensor& like = master.defined() ? master : p.data();
    exp_avg_.push_back(torch::zeros_like(like));
    exp_avg_sq_.push_back(torch::zeros_like(like));
  }
}

void AdamW::Step(double lr) {
  torch::NoGradGuard no_grad;
  ++steps_;
  // The parameters with a gradient, as lists for the multi-tensor ops. `w` is
  // the float32 value updated: the master weight, or the parameter through
  // p.data() (same storage, fresh version counter: see the class comment).
  std::vector<torch::Tensor> w, g, exp_avg, exp_avg_sq;
  std::vector<bool> decay;  // weight decay on w[i]: matrices only
  std::vector<torch::Tensor> low, low_grad, master, master_grad;  // parameters with master weights
  for (size_t i = 0; i < params_.size(); ++i) {
    const torch::Tensor& p = params_[i].second;
    if (!p.grad().defined()) continue;
    if (master_[i].defined()) {
      low.push_back(p.data());
      low_grad.push_back(p.grad().data());
      master.push_back(master_[i]);
      master_grad.push_back(master_grad_[i]);
      w.push_back(master_[i]);
      g.push_back(master_grad_[i]);
    } else {
      w.push_back(p.data());
      g.push_back(p.grad().data());
    }
    decay.push_back(p.dim() >= 2 && options_.weight_decay != 0);
    exp_avg.push_back(exp_avg_[i]);
    exp_avg_sq.push_back(exp_avg_sq_[i]);
  }
  last_step_fused_ = false;
  if (w.empty()) return;
  CopyAll(master_grad, low_grad);  // bf16 gradients in float32
  if (FusedApplies(w, g, exp_avg, exp_avg_sq)) {
    FusedStep(lr, w, g, exp_avg, exp_avg_sq, decay);
    CopyAll(low, master);  // the parameters take the rounded master values
    last_step_fused_ = true;
    return;
  }
  const double bias1 = FirstMomentBias();
  const double bias2 = 1.0 - std::pow(options_.beta2, steps_);
  std::vector<torch::Tensor> decayed;
  for (size_t i = 0; i < w.size(); ++i) {
    if (decay[i]) decayed.push_back(w[i]);
  }
  if (!decayed.empty()) at::_foreach_mul_(decayed, 1.0 - lr * options_.weight_decay);
  at::_foreach_mul_(exp_avg, options_.beta1);
  at::_foreach_add_(exp_avg, g, 1.0 - options_.beta1);
  at::_foreach_mul_(exp_avg_sq, options_.beta2);
  at::_foreach_addcmul_(exp_avg_sq, g, g, 1.0 - options_.beta2);
  std::vector<torch::Tensor> denom = at::_foreach_sqrt(exp_avg_sq);
  at::_foreach_div_(denom, std::sqrt(bias2));
  at::_foreach_add_(denom, options_.eps);
  at::_foreach_addcdiv_(w, exp_avg, denom, -lr / bias1);
  CopyAll(low, master);  // the parameters take the rounded master values
}

bool AdamW::FusedApplies(const std::vector<torch::Tensor>& w, const std::vector<torch::Tensor>& g,
                         const std::vector<torch::Tensor>& exp_avg,
                         const std::vector<torch::Tensor>& exp_avg_sq) {
  // What the fused kernel asks of its lists: one device (LibTorch 2.11 has it
  // for the CPU and CUDA), one dtype, and for each parameter the same sizes
  // and strides in all four, dense.
  const torch::Device device = w[0].device();
  if (!device.is_cuda() && !device.is_cpu()) return false;
  for (size_t i = 0; i < w.size(); ++i) {
    for (const torch::Tensor* t : {&w[i], &g[i], &exp_avg[i], &exp_avg_sq[i]}) {
      if (t->device() != device || t->scalar_type() != torch::kFloat ||
          t->layout() != torch::kStrided || !t->is_non_overlapping_and_dense() ||
          !t->sizes().equals(w[i].sizes()) || !t->strides().equals(w[i].strides())) {
        return false;
      }
    }
  }
  return true;
}

void AdamW::FusedStep(double lr, const std::vector<torch::Tensor>& w,
                      const std::vector<torch::Tensor>& g,
                      const std::vector<torch::Tensor>& exp_avg,
                      const std::vector<torch::Tensor>& exp_avg_sq,
                      const std::vector<bool>& decay) {
  // The kernel reads the step (for the bias corrections) from a float32
  // tensor on the device, one entry per parameter: one tensor serves all.
  if (!step_count_.defined() || step_count_.device() != w[0].device()) {
    step_count_ =
        torch::zeros({1}, torch::TensorOptions().dtype(torch::kFloat).device(w[0].device()));
  }
  step_count_.fill_(static_cast<double>(steps_));
  // One weight decay per call: the matrices, then the rest without.
  for (bool decayed : {true, false}) {
    std::vector<torch::Tensor> gw, gg, gm, gv, steps;
    for (size_t i = 0; i < w.size(); ++i) {
      if (decay[i] != decayed) continue;
      gw.push_back(w[i]);
      gg.push_back(g[i]);
      gm.push_back(exp_avg[i]);
      gv.push_back(exp_avg_sq[i]);
      steps.push_back(step_count_);
    }
    if (gw.empty()) continue;
    at::_fused_adamw_(gw, gg, gm, gv, /*max_exp_avg_sqs=*/at::TensorList(), steps, lr,
                      options_.beta1, options_.beta2, decayed ? options_.weight_decay : 0.0,
                      options_.eps, /*amsgrad=*/false, /*maximize=*/false);
  }
}

double AdamW::FirstMomentBias() const { return 1.0 - std::pow(options_.beta1, steps_); }

torch::Tensor AdamW::RootVHat(const torch::Tensor& exp_avg_sq) const {
  return exp_avg_sq.sqrt().div_(std::sqrt(1.0 - std::pow(options_.beta2, steps_)));
}

void AdamW::Extrapolate(double lr_steps, const Reads& reads) {
  Retract();
  if (steps_ == 0 || lr_steps == 0) return;
  torch::NoGradGuard no_grad;
  const double scale = -lr_steps / FirstMomentBias();
  moved_.resize(params_.size());
  const auto moves = [&](const std::string& name) {
    return reads.only == nullptr ||
           std::find(reads.only->begin(), reads.only->end(), name) != reads.only->end();
  };
  // The copies of the float32 parameters this move takes whole: one buffer.
  int64_t copied = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::string& name = params_[i].first;
    if (moves(name) && reads.rows.count(name) == 0 && !master_[i].defined()) {
      copied += params_[i].second.numel();
    }
  }
  if (copied > 0 && (!copies_.defined() || copies_.numel() < copied ||
                     copies_.device() != params_.front().second.device())) {
    copies_ = torch::empty({copied}, torch::TensorOptions()
                                         .dtype(torch::kFloat)
                                         .device(params_.front().second.device()));
  }
  int64_t offset = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    Moved& moved = moved_[i];
    const std::string& name = params_[i].first;
    torch::Tensor p = params_[i].second.data();
    moved.any = moves(name);
    moved.rows = torch::Tensor();
    moved.before = torch::Tensor();
    if (!moved.any) continue;
    // -lr_steps * (m / bias1) / (sqrt(v) / sqrt(bias2) + eps), element by element.
    if (const auto it = reads.rows.find(name); it != reads.rows.end()) {
      moved.rows = it->second.to(p.device(), torch::kLong);
      const torch::Tensor from = (master_[i].defined() ? master_[i] : p).index_select(0, moved.rows);
      if (!master_[i].defined()) moved.before = from;
      const torch::Tensor denom =
          RootVHat(exp_avg_sq_[i].index_select(0, moved.rows)).add_(options_.eps);
      p.index_copy_(0, moved.rows,
                    from.addcdiv(exp_avg_[i].index_select(0, moved.rows), denom, scale)
                        .to(p.scalar_type()));
      continue;
    }
    const torch::Tensor denom = RootVHat(exp_avg_sq_[i]).add_(options_.eps);
    if (master_[i].defined()) {
      p.copy_(master_[i].addcdiv(exp_avg_[i], denom, scale));
      continue;
    }
    moved.before = copies_.narrow(0, offset, p.numel()).view(p.sizes());
    offset += p.numel();
    moved.before.copy_(p);
    p.addcdiv_(exp_avg_[i], denom, scale);
  }
}

void AdamW::Extrapolate(double lr_steps) { Extrapolate(lr_steps, Reads()); }

void AdamW::Retract() {
  torch::NoGradGuard no_grad;
  // Exactly where they were: from the master weights, or the copy taken before the move.
  for (size_t i = 0; i < moved_.size(); ++i) {
    Moved& moved = moved_[i];
    if (!moved.any) continue;
    torch::Tensor p = params_[i].second.data();
    if (moved.rows.defined()) {
      p.index_copy_(0, moved.rows,
                    master_[i].defined()
                        ? master_[i].index_select(0, moved.rows).to(p.scalar_type())
                        : moved.before);
    } else {
      p.copy_(master_[i].defined() ? master_[i] : moved.before);
    }
    moved = Moved();
  }
}

void AdamW::CompensateDelay(double last_lr, double drift, double lambda) {
  if (steps_ == 0 || drift == 0 || lambda == 0) return;
  torch::NoGradGuard no_grad;
  const double bias1 = FirstMomentBias();
  for (size_t i = 0; i < params_.size(); ++i) {
    const torch::Tensor& p = params_[i].second;
    if (!p.grad().defined()) continue;
    const torch::Tensor w = master_[i].defined() ? master_[i] : p.data();
    const torch::Tensor g = p.grad().data().to(torch::kFloat);
    // sqrt(v_hat), and the last move: w_now - w_then = -last_lr * (r + wd * w_then),
    // r = m_hat / (sqrt(v_hat) + eps), with w_now = (1 - last_lr * wd) w_then - last_lr r.
    const torch::Tensor root_v = RootVHat(exp_avg_sq_[i]);
    const torch::Tensor r = exp_avg_[i].div(bias1).div_(root_v + options_.eps);
    torch::Tensor move;
    const double decay = p.dim() >= 2 ? last_lr * options_.weight_decay : 0.0;
    if (decay != 0) {
      const torch::Tensor then = (w + last_lr * r) / (1.0 - decay);
      move = w - then;
    } else {
      move = r.mul(-last_lr);
    }
    // g + lambda * g^2 * drift * move / sqrt(v_hat): zero where v_hat is (never seen a gradient).
    const torch::Tensor term = g.square().mul_(move).mul_(lambda * drift).div_(root_v + options_.eps);
    p.grad().data().add_(term.to(p.grad().scalar_type()));
  }
}

void AdamW::ZeroGrad() {
  // Dropped, as torch's zero_grad(set_to_none) does: the next backward then
  // takes its gradient as it comes instead of adding it to zeros.
  for (auto& [name, p] : params_) p.mutable_grad() = torch::Tensor();
}

std::vector<std::pair<std::string, torch::Tensor>> AdamW::State() const {
  std::vector<std::pair<std::string, torch::Tensor>> state;
  for (size_t i = 0; i < params_.size(); ++i) {
    state.emplace_back("exp_avg/" + params_[i].first, exp_avg_[i]);
    state.emplace_back("exp_avg_sq/" + params_[i].first, exp_avg_sq_[i]);
    if (master_[i].defined()) state.emplace_back("master/" + params_[i].first, master_[i]);
  }
  return state;
}

void AdamW::SetState(int64_t steps,
                     const std::vector<std::pair<std::string, torch::Tensor>>& state) {
  std::map<std::string, torch::Tensor> by_name(state.begin(), state.end());
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    exp_avg_[i].copy_(by_name.at("exp_avg/" + params_[i].first));
    exp_avg_sq_[i].copy_(by_name.at("exp_avg_sq/" + params_[i].first));
    if (master_[i].defined()) master_[i].copy_(by_name.at("master/" + params_[i].first));
  }
  steps_ = steps;
}

}  // namespace paci
