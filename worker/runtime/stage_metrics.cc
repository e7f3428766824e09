#include "worker/runtime/stage_metrics.h"

#include <algorithm>
#include <map>

namespace paci {
namespace {

using Labels = std::map<std::string, std::string>;

Labels With(Labels labels, const std::string& key, const std::string& value) {
  labels[key] = value;
  return labels;
}

prometheus::Counter& AddCounter(prometheus::Registry& r, const char* name, const char* help,
                                const Labels& labels) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r).Add(labels);
}

prometheus::Gauge& AddGauge(prometheus::Registry& r, const char* name, const char* help,
                            const Labels& labels) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(r).Add(labels);
}

prometheus::Histogram::BucketBoundaries DriftBuckets(int num_stages) {
  prometheus::Histogram::BucketBoundaries buckets;
  for (int d = 0; d < std::max(1, num_stages); ++d) buckets.push_back(d);
  return buckets;
}

constexpr char kMicroBatches[] = "Micro-batches processed, by pass";
constexpr char kBytesSent[] = "Tensor bytes sent to the neighbouring stages";

}  // namespace

StageMetrics::StageMetrics(prometheus::Registry& r, const std::string& training_job, int stage,
                           int replica, int num_stages, int64_t drift_bound, int64_t drift_limit)
    : StageMetrics(r,
                   Labels{{"training_job", training_job},
                          {"stage", std::to_string(stage)},
                          {"replica", std::to_string(replica)}},
                   num_stages, drift_bound, drift_limit) {}

StageMetrics::StageMetrics(prometheus::Registry& r, const Labels& l, int num_stages,
                           int64_t drift_bound, int64_t drift_limit)
    : drift_(prometheus::BuildHistogram()
                 .Name("paci_weight_drift_steps")
                 .Help("Optimizer steps a micro-batch crossed between its forward and backward")
                 .Register(r)
                 .Add(l, DriftBuckets(num_stages))),
      drift_bound_(AddGauge(r, "paci_weight_drift_bound_steps",
                            "The configured drift bound ceil((P-1-s)/a) of this stage", l)),
      drift_limit_(AddGauge(r, "paci_weight_drift_limit_steps",
                            "The job's drift limit D (pipeline.max_drift, or what a gives)", l)),
      forward_(AddCounter(r, "paci_microbatches_total", kMicroBatches, With(l, "pass", "forward"))),
      backward_(AddCounter(r, "paci_microbatches_total", kMicroBatches, With(l, "pass", "backward"))),
      tokens_(AddCounter(r, "paci_tokens_total", "Tokens through backward at this stage", l)),
      steps_(AddCounter(r, "paci_optimizer_steps_total", "Optimizer steps taken by this stage", l)),
      busy_(AddCounter(r, "paci_stage_busy_seconds_total",
                       "Seconds spent in forward, backward, optimizer, evaluation and checkpoints",
                       l)),
      idle_(AddCounter(r, "paci_stage_idle_seconds_total",
                       "Seconds spent waiting for a neighbour (the pipeline bubble)", l)),
      bytes_forward_(AddCounter(r, "paci_activation_bytes_sent_total", kBytesSent,
                                With(l, "direction", "forward"))),
      bytes_backward_(AddCounter(r, "paci_activation_bytes_sent_total", kBytesSent,
                                 With(l, "direction", "backward"))),
      checkpoints_(AddCounter(r, "paci_checkpoints_written_total",
                              "Checkpoint shards written by this stage", l)),
      gradient_norm_(AddGauge(r, "paci_gradient_norm",
                              "L2 norm of this stage's gradients at its last optimizer step, "
                              "before optimizer.clip_norm",
                              l)),
      nonfinite_skipped_(AddCounter(r, "paci_nonfinite_steps_skipped_total",
                                    "Optimizer steps skipped because the gradients held NaN or Inf",
                                    l)),
      allreduce_(prometheus::BuildHistogram()
                     .Name("paci_allreduce_seconds")
                     .Help("Seconds of each optimizer step's gradient all-reduce with the other "
                           "replicas of the stage (pipeline.data_parallel > 1)")
                     .Register(r)
                     .Add(l, prometheus::Histogram::BucketBoundaries{
                                 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                                 1, 2.5, 10, 60})) {
  drift_bound_.Set(static_cast<double>(drift_bound));
  drift_limit_.Set(static_cast<double>(drift_limit));
}

}  // namespace paci
