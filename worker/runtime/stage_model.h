#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "absl/status/statusor.h"
#include "common/memory_limit.h"
#include "common/schedule_kind.h"
#include "paci/v1/job.pb.h"
#include "worker/model/adamw.h"
#include "worker/model/gpt.h"
#include "worker/model/gpt_weights.h"
#include "worker/model/lr_schedule.h"
#include "worker/model/precision.h"

namespace paci {

// One stage's slice of the model on its device with its AdamW, and the rules
// of its optimizer step: the learning-rate schedule, the drift correction
// (pipeline.drift_correction), the non-finite guard and optimizer.clip_norm.
// No schedule, no links, no files: the runtime drives it, the checkpointer
// saves and loads its module and optimizer.
//
// Used by one thread, the stage's compute thread.
class StageModel {
 public:
  // Builds the stage's part of the partition plan (every stage computes the
  // same plan from the same spec: the cut needs no agreement) on its device
  // and precision, in training mode. `source` (checkpoint.init_from, may be
  // null) gives the starting weights by name, copied before AdamW takes its
  // float32 master weights; `source_name` names it in errors.
  // FailedPrecondition naming the field for a device this process lacks, or
  // a source of another shape or missing a parameter.
  static absl::StatusOr<std::unique_ptr<StageModel>> Create(const v1::JobSpec& spec, int stage,
                                                            int replica,
                                                            const NamedWeights* source = nullptr,
                                                            const std::string& source_name = "");

  // OK when the stage's estimated peak memory (EstimateStageMemory: weights,
  // AdamW, the activations in flight, the head's logits) fits `limit`;
  // otherwise FailedPrecondition with the estimate, what it is made of, the
  // limit and its source, and what to change. Create checks a CPU stage
  // against MemoryLimitOfThisProcess() before it allocates anything.
  static absl::Status CheckMemory(const v1::JobSpec& spec, int stage, Precision precision,
                                  const MemoryLimit& limit);

  GptStage& module() { return module_; }
  AdamW& optimizer() { return *optimizer_; }
  const StagePlacement& placement() const { return placement_; }
  // The plan's units of this stage ("units 0-3") and its predicted share of the cost.
  const std::string& units() const { return units_; }
  double predicted_cost_share() const { return cost_share_; }

  // A host tensor on the stage's device. To a GPU from page-locked memory,
  // without waiting (non_blocking): a copy would otherwise first wait for
  // every kernel queued before it.
  torch::Tensor ToDevice(const torch::Tensor& host) const;
  // Inputs and targets [B, T] of the corpus windows [B, T + 1], on the device.
  std::pair<torch::Tensor, torch::Tensor> Tokens(const std::vector<int32_t>& windows) const;
  // The last stage's forward to the language-model loss (GptStage::Loss: the
  // head and its cross-entropy fused), in float32 whatever the weights.
  // `first_rows`: a split head's first rows, from the stage before (evaluation).
  torch::Tensor ForwardLoss(const torch::Tensor& input, const torch::Tensor& targets,
                            const torch::Tensor& first_rows = {}) {
    return module_->Loss(input, targets, first_rows);
  }

  // The weight of a backward's gradient that crossed `drift` steps, by the
  // drift correction's row (common/schedule_kind.h): 1/(1+drift) for
  // "staleness", 1 otherwise.
  double GradientWeight(int64_t drift) const;
  // Multiplies every defined gradient by `factor`.
  void ScaleGradients(double factor);
  // Every defined gradient, in parameter order (what replicas average).
  std::vector<torch::Tensor> Gradients() const;

  // pipeline.drift_correction "predict" (its row's prediction_steps): while
  // the returned guard lives, each forward of the module runs on weights
  // extrapolated along AdamW's update direction by the steps its backward
  // will have crossed (`steps_ahead`, StageScheduler::StepsBeforeBackward),
  // at the learning rate of the next step after `steps_taken`: about the
  // weights its backward meets. One piece at a time (GptStageImpl's piece
  // hook): as the forward comes to a piece, the piece before goes back bit
  // for bit and this one moves (AdamW::Extrapolate and Retract), so the copy
  // that puts them back is one piece's, not the stage's; the guard's end puts
  // back the last. A no-op for the other corrections and for steps_ahead 0.
  // Only what the forward reads moves: of the token embedding the rows of
  // `tokens` (the first stage's micro-batch; undefined: every row); a split
  // head's rows on the stage before the last, whose forward runs apart
  // (HEAD_INPUT), are no piece of the module's forward and stay.
  class Prediction {
   public:
    Prediction() = default;  // nothing moves
    Prediction(AdamW* optimizer, GptStageImpl* module, double lr_steps, AdamW::Reads reads);
    Prediction(const Prediction&) = delete;
    Prediction& operator=(const Prediction&) = delete;
    ~Prediction();

   private:
    AdamW* optimizer_ = nullptr;  // null: nothing moves
    GptStageImpl* module_ = nullptr;
    double lr_steps_ = 0;
    AdamW::Reads reads_;
  };
  [[nodiscard]] Prediction PredictWeights(int64_t steps_ahead, int64_t steps_taken,
                                         const torch::Tensor& tokens = {});

  struct StepOutcome {
    double gradient_norm = 0;  // before clipping; NaN or Inf when a gradient is
    bool skipped = false;      // the gradients were not finite: weights unchanged
  };
  // "delay-comp": compensates this stage's gradients for `mean_drift` (the
  // mean drift of the micro-batches of step `step`, 1-based) before step
  // `step`. Each replica compensates its own gradients, before they are
  // averaged (the drifts are each replica's own), so every replica then steps
  // with the same ones. A no-op for the other corrections.
  void CompensateDelay(int64_t step, double mean_drift);
  // Optimizer step number `step` (1-based): the guard, clip_norm, AdamW at
  // the schedule's rate (times "stage-lr"'s factor), then the gradients dropped.
  StepOutcome Step(int64_t step);
  // HashTensors of the weights, chained on `previous`.
  uint32_t HashWeights(uint32_t previous) const;

 private:
  StageModel(const v1::JobSpec& spec, int stage, const StagePlacement& placement);
  double GradientNorm() const;

  const int64_t micro_batch_size_, seq_len_;
  const double clip_norm_;
  LrScheduleOptions lr_;
  // pipeline.drift_correction's row; never null.
  const DriftCorrectionTraits* correction_ = &DriftCorrections().front();
  // The correction's factor of this stage's learning rate ("stage-lr": 1/sqrt(1 + this stage's
  // drift bound); 1 otherwise).
  double lr_factor_ = 1.0;
  const StagePlacement placement_;
  GptStage module_{nullptr};
  std::unique_ptr<AdamW> optimizer_;
  std::string units_;
  double cost_share_ = 0;
};

}  // namespace paci
