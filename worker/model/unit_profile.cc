#include "worker/model/unit_profile.h"

#include <algorithm>
#include <chrono>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
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
      torch::Tensor out = part.has_head() ? stage->Loss(input, tokens) : stage(input);
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

std::string UnitProfileReport(const v1::JobSpec& spec, const torch::Device& device) {
  GptConfig config = GptConfigFromSpec(spec.model());
  config.dropout = 0;  // the costs of the computation, not of a random mask
  UnitProfileOptions options;
  options.micro_batch_size = spec.pipeline().micro_batch_size();
  options.accumulation = spec.pipeline().accumulation();
  options.device = device;
  const std::vector<UnitCost> measured = ProfileUnitCosts(config, options);
  const std::vector<UnitCost> model = FlopUnitCosts(ModelShapeFromSpec(spec));
  std::vector<double> measured_total, model_total;
  std::string units;
  for (size_t u = 0; u < measured.size(); ++u) {
    measured_total.push_back(measured[u].total());
    model_total.push_back(model[u].total());
    absl::StrAppend(
        &units, u ? ",\n  " : "  ",
        absl::StrFormat("{\"unit\": %d, \"name\": \"%s\", \"forward_ms\": %.3f, "
                        "\"backward_ms\": %.3f, \"optimizer_ms\": %.3f, \"model_gflop\": %.4f}",
                        u, PartitionUnitName(config.num_layers, u), 1e3 * measured[u].forward,
                        1e3 * measured[u].backward, 1e3 * measured[u].optimizer,
                        1e-9 * model[u].total()));
  }
  const int P = spec.pipeline().num_stages();
  // The balanced plans with the head split by vocabulary weighed (0: not split).
  const auto split = [&](const std::vector<UnitCost>& costs) -> int64_t {
    absl::StatusOr<PartitionPlan> plan =
        PlanPartitionWithCosts(costs, P, "balanced", config.vocab_size);
    return plan.ok() ? plan->head_split : 0;
  };
  return absl::StrCat("{\"units\": [\n", units, "\n],\n \"measured_cut\": [",
                      absl::StrJoin(BalancedCut(measured_total, P), ", "), "], \"model_cut\": [",
                      absl::StrJoin(BalancedCut(model_total, P), ", "),
                      "],\n \"measured_head_split\": ", split(measured),
                      ", \"model_head_split\": ", split(model), "}\n");
}

}  // namespace paci
