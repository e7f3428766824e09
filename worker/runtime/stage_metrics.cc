#include "worker/runtime/stage_metrics.h"

#include <algorithm>

namespace paci {
namespace {

using Labels = std::map<std::string, std::string>;

prometheus::Histogram::BucketBoundaries DriftBuckets(int num_stages) {
  prometheus::Histogram::BucketBoundaries buckets;
  for (int d = 0; d < std::max(1, num_stages); ++d) buckets.push_back(d);
  return buckets;
}

}  // namespace

StageMetrics::StageMetrics(prometheus::Registry& r, const std::string& job, int stage,
                           int num_stages, int64_t drift_bound)
    : drift_(prometheus::BuildHistogram()
                 .Name("paci_weight_drift_steps")
                 .Help("Optimizer steps a micro-batch crossed between its forward and backward")
                 .Register(r)
                 .Add(Labels{{"job", job}, {"stage", std::to_string(stage)}},
                      DriftBuckets(num_stages))),
      drift_bound_(prometheus::BuildGauge()
                       .Name("paci_weight_drift_bound_steps")
                       .Help("The configured drift bound ceil((P-1-s)/a) of this stage")
                       .Register(r)
                       .Add(Labels{{"job", job}, {"stage", std::to_string(stage)}})),
      forward_(prometheus::BuildCounter()
                   .Name("paci_microbatches_total")
                   .Help("Micro-batches processed, by pass")
                   .Register(r)
                   .Add(Labels{{"job", job}, {"stage", std::to_string(stage)}, {"pass", "forward"}})),
      backward_(prometheus::BuildCounter()
                    .Name("paci_microbatches_total")
                    .Help("Micro-batches processed, by pass")
                    .Register(r)
                    .Add(Labels{{"job", job}, {"stage", std::to_string(stage)}, {"pass", "backward"}})),
      tokens_(prometheus::BuildCounter()
                  .Name("paci_tokens_total")
                  .Help("Tokens through backward at this stage")
                  .Register(r)
                  .Add(Labels{{"job", job}, {"stage", std::to_string(stage)}})),
      steps_(prometheus::BuildCounter()
                 .Name("paci_optimizer_steps_total")
                 .Help("Optimizer steps taken by this stage")
                 .Register(r)
                 .Add(Labels{{"job", job}, {"stage", std::to_string(stage)}})),
      busy_(prometheus::BuildCounter()
                .Name("paci_stage_busy_seconds_total")
                .Help("Seconds spent in forward, backward, optimizer, evaluation and checkpoints")
                .Register(r)
                .Add(Labels{{"job", job}, {"stage", std::to_string(stage)}})),
      idle_(prometheus::BuildCounter()
                .Name("paci_stage_idle_seconds_total")
                .Help("Seconds spent waiting for a neighbour (the pipeline bubble)")
                .Register(r)
                .Add(Labels{{"job", job}, {"stage", std::to_string(stage)}})),
      bytes_forward_(prometheus::BuildCounter()
                         .Name("paci_activation_bytes_sent_total")
                         .Help("Tensor bytes sent to the neighbouring stages")
                         .Register(r)
                         .Add(Labels{{"job", job}, {"stage", std::to_string(stage)},
                                     {"direction", "forward"}})),
      bytes_backward_(prometheus::BuildCounter()
                          .Name("paci_activation_bytes_sent_total")
                          .Help("Tensor bytes sent to the neighbouring stages")
                          .Register(r)
                          .Add(Labels{{"job", job}, {"stage", std::to_string(stage)},
                                      {"direction", "backward"}})),
      train_loss_(prometheus::BuildGauge()
                      .Name("paci_train_loss")
                      .Help("Mean training loss of the last optimizer step (last stage)")
                      .Register(r)
                      .Add(Labels{{"job", job}, {"stage", std::to_string(stage)}})),
      validation_loss_(prometheus::BuildGauge()
                           .Name("paci_validation_loss")
                           .Help("Validation loss at the last drained evaluation (last stage)")
                           .Register(r)
                           .Add(Labels{{"job", job}, {"stage", std::to_string(stage)}})),
      tokens_per_second_(prometheus::BuildGauge()
                             .Name("paci_tokens_per_second")
                             .Help("Training tokens per second through this stage")
                             .Register(r)
                             .Add(Labels{{"job", job}, {"stage", std::to_string(stage)}})),
      checkpoints_(prometheus::BuildCounter()
                       .Name("paci_checkpoints_written_total")
                       .Help("Checkpoint shards written by this stage")
                       .Register(r)
                       .Add(Labels{{"job", job}, {"stage", std::to_string(stage)}})) {
  drift_bound_.Set(static_cast<double>(drift_bound));
}

}  // namespace paci
