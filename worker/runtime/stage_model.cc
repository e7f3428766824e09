#include "worker/runtime/stage_model.h"

#include <cmath>
#include <utility>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/job_spec.h"
#include "common/schedule_kind.h"
#include "common/status_macros.h"
#include "worker/model/partition.h"
#include "worker/runtime/replica_group.h"

namespace paci {

StageModel::StageModel(const v1::JobSpec& spec, int stage, const StagePlacement& placement)
    : micro_batch_size_(spec.pipeline().micro_batch_size()),
      seq_len_(spec.model().seq_len()),
      clip_norm_(spec.optimizer().clip_norm()),
      placement_(placement) {
  lr_.peak_lr = spec.optimizer().lr();
  lr_.total_steps = spec.training().steps();
  lr_.warmup_fraction = spec.optimizer().warmup_fraction();
  lr_.min_lr_ratio = spec.optimizer().min_lr_ratio();
  // pipeline.drift_correction's row of the table (a validated spec names one;
  // anything else corrects nothing, as "none").
  if (const DriftCorrectionTraits* correction =
          FindDriftCorrection(spec.pipeline().drift_correction())) {
    correction_ = correction;
  }
  const ScheduleKind kind =
      ParseScheduleKind(spec.pipeline().schedule()).value_or(ScheduleKind::kPaci);
  lr_factor_ = correction_->lr_factor(DriftBound(kind, spec.pipeline().num_stages(), stage,
                                                 spec.pipeline().accumulation()));
}

absl::StatusOr<std::unique_ptr<StageModel>> StageModel::Create(const v1::JobSpec& spec, int stage,
                                                               int replica,
                                                               const NamedWeights* source,
                                                               const std::string& source_name) {
  ASSIGN_OR_RETURN(const StagePlacement placement,
                   ResolvePlacement(StageDevice(spec, stage, replica), spec.runtime().precision()));
  if (placement.device.is_cpu()) {
    RETURN_IF_ERROR(CheckMemory(spec, stage, placement.precision, MemoryLimitOfThisProcess()));
  }
  const std::string precision = absl::StrCat(
      PrecisionName(placement.precision), placement.note.empty() ? "" : " (",
      placement.note, placement.note.empty() ? "" : ")");
  if (placement.emulated) {
    LOG(WARNING) << "job=" << spec.name() << " stage " << stage << " precision " << precision;
  } else {
    LOG(INFO) << "job=" << spec.name() << " stage " << stage << " precision " << precision;
  }
  std::unique_ptr<StageModel> model(new StageModel(spec, stage, placement));
  const GptConfig config = GptConfigFromSpec(spec.model());
  // Dropout masks differ per stage and replica (the weights are initialised
  // per name, whatever the seed).
  torch::manual_seed(config.init_seed + stage + 7919 * replica);
  ASSIGN_OR_RETURN(const PartitionPlan plan, PlanPartition(spec));
  const StagePartition partition = plan.Stage(stage);
  model->units_ = partition.Describe();
  model->cost_share_ = plan.cost_share[stage];
  LOG(INFO) << "job=" << spec.name() << " stage " << stage << " partition=" << plan.mode
            << " cut=" << absl::StrJoin(plan.boundaries, ",") << ": units " << model->units_
            << ", predicted share of the cost " << absl::StrFormat("%.3f", model->cost_share_);
  GptStage& module = model->module_ = GptStage(config, partition);
  // Initialised on the CPU (the same weights wherever it runs), then moved.
  module->to(placement.device);
  if (placement.weight_dtype() != torch::kFloat) {
    // The weights only: buffers such as the causal mask keep their type.
    torch::NoGradGuard no_grad;
    for (torch::Tensor& p : module->parameters()) p.set_data(p.data().to(placement.weight_dtype()));
  }
  module->train();
  // Before AdamW: its float32 master weights (bf16-weights) copy what is there.
  if (source != nullptr) {
    // A split head takes its rows of the source's head.
    NamedWeights rows;
    for (const auto& [name, tensor] : *source) rows[name] = StageRowsOf(*module, name, tensor);
    RETURN_IF_ERROR(CopyWeightsByName(rows, source_name, *module));
  }
  std::vector<std::pair<std::string, torch::Tensor>> params;
  for (auto& item : module->named_parameters()) params.emplace_back(item.key(), item.value());
  AdamWOptions adamw;
  adamw.beta1 = spec.optimizer().beta1();
  adamw.beta2 = spec.optimizer().beta2();
  adamw.eps = spec.optimizer().eps();
  adamw.weight_decay = spec.optimizer().weight_decay();
  model->optimizer_ = std::make_unique<AdamW>(std::move(params), adamw);
  return model;
}

absl::Status StageModel::CheckMemory(const v1::JobSpec& spec, int stage, Precision precision,
                                     const MemoryLimit& limit) {
  if (limit.bytes == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(const PartitionPlan plan, PlanPartition(spec));
  const ScheduleTraits& schedule = ScheduleTraitsOf(
      ParseScheduleKind(spec.pipeline().schedule()).value_or(ScheduleKind::kPaci));
  const int in_flight = schedule.in_flight_limit(
      spec.pipeline().num_stages(), stage,
      schedule.effective_accumulation(spec.pipeline().accumulation()));
  const StageMemory need = EstimateStageMemory(ModelShapeFromSpec(spec), plan.Stage(stage),
                                               in_flight, precision);
  if (need.total() <= static_cast<double>(limit.bytes)) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrFormat(
      "stage %d (units %s) needs about %s, more than the %.2f GiB it has (%s): lower "
      "model.vocab_size (%d), model.d_model, pipeline.micro_batch_size or model.seq_len, "
      "run more stages, or give the workers more memory",
      stage, plan.Stage(stage).Describe(), need.Describe(),
      static_cast<double>(limit.bytes) / (1 << 30), limit.source, spec.model().vocab_size()));
}

torch::Tensor StageModel::ToDevice(const torch::Tensor& host) const {
  if (!placement_.device.is_cuda()) return host.to(placement_.device);
  // pin_memory() returns a tensor that is pinned already as it is; the
  // pinned block is not reused before the copy has read it.
  return host.pin_memory().to(placement_.device, /*non_blocking=*/true);
}

std::pair<torch::Tensor, torch::Tensor> StageModel::Tokens(
    const std::vector<int32_t>& windows) const {
  const int64_t B = micro_batch_size_, T = seq_len_;
  auto all = ToDevice(
      torch::from_blob(const_cast<int32_t*>(windows.data()), {B, T + 1}, torch::kInt32)
          .to(torch::kLong));
  using torch::indexing::Slice;
  return {all.index({Slice(), Slice(0, T)}), all.index({Slice(), Slice(1, T + 1)})};
}

double StageModel::GradientWeight(int64_t drift) const {
  return correction_->gradient_weight(drift);
}

void StageModel::ScaleGradients(double factor) {
  torch::NoGradGuard no_grad;
  for (const auto& [name, parameter] : optimizer_->parameters()) {
    if (parameter.grad().defined()) parameter.grad().mul_(factor);
  }
}

std::vector<torch::Tensor> StageModel::Gradients() const {
  std::vector<torch::Tensor> gradients;
  for (const auto& [name, parameter] : optimizer_->parameters()) {
    if (parameter.grad().defined()) gradients.push_back(parameter.grad());
  }
  return gradients;
}

double StageModel::GradientNorm() const {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> norms;
  // In double, so that large finite gradients do not overflow to Inf; a
  // piece at a time, as the norm in double casts its input whole: a
  // [32768, 256] embedding's gradient would take a 64 MB double copy at the
  // step, on top of everything else the stage holds then.
  constexpr int64_t kPiece = int64_t{1} << 18;  // 2 MB in double
  for (const torch::Tensor& gradient : Gradients()) {
    for (const torch::Tensor& piece : gradient.reshape({-1}).split(kPiece)) {
      norms.push_back(at::linalg_vector_norm(piece, 2, c10::nullopt, false, torch::kDouble));
    }
  }
  if (norms.empty()) return 0;
  // One read of the device per step, not one per parameter.
  return torch::stack(norms).norm().item<double>();
}

StageModel::Prediction::Prediction(AdamW* optimizer, GptStageImpl* module, double lr_steps,
                                   AdamW::Reads reads)
    : optimizer_(optimizer), module_(module), lr_steps_(lr_steps), reads_(std::move(reads)) {
  // Each piece's move puts the one before it back (AdamW::Extrapolate).
  module_->set_piece_hook([this](const std::vector<std::string>& names) {
    reads_.only = &names;
    optimizer_->Extrapolate(lr_steps_, reads_);
  });
}

StageModel::Prediction::~Prediction() {
  if (optimizer_ == nullptr) return;
  module_->set_piece_hook(nullptr);
  optimizer_->RetractAndRelease();
}

StageModel::Prediction StageModel::PredictWeights(int64_t steps_ahead, int64_t steps_taken,
                                                  const torch::Tensor& tokens) {
  const int64_t steps = correction_->prediction_steps(steps_ahead);
  if (steps <= 0) return Prediction();
  // The next step's rate (Step(steps_taken + 1) uses LearningRateAt(steps_taken)).
  const double lr = LearningRateAt(lr_, steps_taken) * lr_factor_;
  AdamW::Reads reads;
  const StagePartition& partition = module_->partition();
  if (tokens.defined() && partition.has_embedding()) {
    reads.rows[kTokenEmbeddingWeight] = std::get<0>(at::_unique(tokens.flatten()));
  }
  return Prediction(optimizer_.get(), module_.get(), lr * static_cast<double>(steps),
                    std::move(reads));
}

void StageModel::CompensateDelay(int64_t step, double mean_drift) {
  if (step <= 1 || mean_drift <= 0 || correction_->delay_compensation == 0) return;
  // The last step, step - 1, ran at LearningRateAt(step - 2).
  optimizer_->CompensateDelay(LearningRateAt(lr_, step - 2) * lr_factor_, mean_drift,
                              correction_->delay_compensation);
}

StageModel::StepOutcome StageModel::Step(int64_t step) {
  // The guard and optimizer.clip_norm look at this stage's gradients only: no
  // stage waits for another's norm (docs/design.md, "Training safety").
  StepOutcome outcome;
  outcome.gradient_norm = GradientNorm();
  outcome.skipped = !std::isfinite(outcome.gradient_norm);
  if (!outcome.skipped) {
    if (clip_norm_ > 0 && outcome.gradient_norm > clip_norm_) {
      ScaleGradients(clip_norm_ / outcome.gradient_norm);
    }
    optimizer_->Step(LearningRateAt(lr_, step - 1) * lr_factor_);
  }
  optimizer_->ZeroGrad();
  return outcome;
}

uint32_t StageModel::HashWeights(uint32_t previous) const {
  std::vector<torch::Tensor> weights;
  for (const auto& [name, parameter] : optimizer_->parameters()) weights.push_back(parameter);
  return HashTensors(weights, previous);
}

}  // namespace paci
