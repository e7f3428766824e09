#include "worker/model/adamw.h"

#include <cmath>
#include <map>

namespace paci {

AdamW::AdamW(std::vector<std::pair<std::string, torch::Tensor>> named_parameters,
             const AdamWOptions& options)
    : options_(options), params_(std::move(named_parameters)) {
  for (auto& [name, p] : params_) {
    torch::Tensor master;
    if (p.scalar_type() != torch::kFloat) master = p.detach().to(torch::kFloat).clone();
    master_.push_back(master);
    const torch::Tensor& like = master.defined() ? master : p.data();
    exp_avg_.push_back(torch::zeros_like(like));
    exp_avg_sq_.push_back(torch::zeros_like(like));
  }
}

void AdamW::Step(double lr) {
  torch::NoGradGuard no_grad;
  ++steps_;
  const double bias1 = 1.0 - std::pow(options_.beta1, steps_);
  const double bias2 = 1.0 - std::pow(options_.beta2, steps_);
  for (size_t i = 0; i < params_.size(); ++i) {
    torch::Tensor& p = params_[i].second;
    if (!p.grad().defined()) continue;
    // Same storage, fresh version counter: see the class comment.
    torch::Tensor w = master_[i].defined() ? master_[i] : p.data();
    const torch::Tensor g = p.grad().data().to(torch::kFloat);
    if (p.dim() >= 2 && options_.weight_decay != 0) w.mul_(1.0 - lr * options_.weight_decay);
    exp_avg_[i].mul_(options_.beta1).add_(g, 1.0 - options_.beta1);
    exp_avg_sq_[i].mul_(options_.beta2).addcmul_(g, g, 1.0 - options_.beta2);
    const torch::Tensor denom = (exp_avg_sq_[i].sqrt() / std::sqrt(bias2)).add_(options_.eps);
    w.addcdiv_(exp_avg_[i], denom, -lr / bias1);
    if (master_[i].defined()) p.data().copy_(master_[i]);
  }
}

void AdamW::ZeroGrad() {
  for (auto& [name, p] : params_) {
    if (p.grad().defined()) p.mutable_grad().data().zero_();
  }
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
