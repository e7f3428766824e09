#include "worker/model/unit_profile.h"

#include <algorithm>
#include <chrono>

#include "worker/model/adamw.h"

namespace paci {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

void Sync(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index() < 0 ? 0 : device.index());
}

}  // namespace

std::vector<UnitCost> ProfileUnitCosts(const GptConfig& config, const UnitProfileOptions& o) {
  using Clock = std::chrono::steady_clock;
  const auto seconds = [](Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  const int64_t B = o.micro_batch_size, T = config.seq_len, D = config.d_model;
  std::vector<UnitCost> costs;
  for (int u = 0; u < NumPartitionUnits(config.num_layers); ++u) {
    const StagePartition part{config.num_layers, u, u + 1};
    GptStage stage(config, part);
    stage->to(o.device);
    stage->train();
    std::vector<std::pair<std::string, torch::Tensor>> params;
    for (auto& item : stage->named_parameters()) params.emplace_back(item.key(), item.value());
    AdamW adamw(params, AdamWOptions{});
    const torch::Tensor tokens =
        torch::randint(config.vocab_size, {B, T}, torch::dtype(torch::kLong).device(o.device));
    std::vector<double> forward, backward, step;
    for (int r = 0; r < o.warmup + o.repeats; ++r) {
      torch::Tensor input = part.has_embedding()
                                ? tokens
                                : torch::randn({B, T, D}, torch::device(o.device)).requires_grad_();
      Sync(o.device);
      const auto t0 = Clock::now();
      torch::Tensor out = stage(input);
      if (part.has_head()) out = LanguageModelLoss(out, tokens);
      Sync(o.device);
      const auto t1 = Clock::now();
      if (part.has_head()) {
        out.backward();
      } else {
        out.backward(torch::ones_like(out));
      }
      Sync(o.device);
      const auto t2 = Clock::now();
      adamw.Step(1e-4);
      adamw.ZeroGrad();
      Sync(o.device);
      const auto t3 = Clock::now();
      if (r < o.warmup) continue;
      forward.push_back(seconds(t0, t1));
      backward.push_back(seconds(t1, t2));
      step.push_back(seconds(t2, t3));
    }
    UnitCost c;
    c.forward = Median(forward);
    c.backward = Median(backward);
    c.optimizer = Median(step) / std::max(1, o.accumulation);
    costs.push_back(c);
  }
  return costs;
}

}  // namespace paci
