#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace paci {

// The Prometheus series of one stage (DESIGN.md section 3), labelled with
// job and stage. Thread-safe (prometheus-cpp metrics are).
class StageMetrics {
 public:
  StageMetrics(prometheus::Registry& registry, const std::string& job, int stage,
               int num_stages, int64_t drift_bound);

  void ObserveDrift(int64_t drift) { drift_.Observe(static_cast<double>(drift)); }
  void AddForward() { forward_.Increment(); }
  void AddBackward(int64_t tokens) {
    backward_.Increment();
    tokens_.Increment(static_cast<double>(tokens));
  }
  void AddOptimizerStep() { steps_.Increment(); }
  void AddBusy(double seconds) { busy_.Increment(seconds); }
  void AddIdle(double seconds) { idle_.Increment(seconds); }
  void AddBytesSent(bool forward, int64_t bytes) {
    (forward ? bytes_forward_ : bytes_backward_).Increment(static_cast<double>(bytes));
  }
  void SetTrainLoss(double loss) { train_loss_.Set(loss); }
  void SetValidationLoss(double loss) { validation_loss_.Set(loss); }
  void SetTokensPerSecond(double rate) { tokens_per_second_.Set(rate); }
  void AddCheckpoint() { checkpoints_.Increment(); }

 private:
  StageMetrics(prometheus::Registry& registry, const std::map<std::string, std::string>& labels,
               int num_stages, int64_t drift_bound);

  prometheus::Histogram& drift_;
  prometheus::Gauge& drift_bound_;
  prometheus::Counter& forward_;
  prometheus::Counter& backward_;
  prometheus::Counter& tokens_;
  prometheus::Counter& steps_;
  prometheus::Counter& busy_;
  prometheus::Counter& idle_;
  prometheus::Counter& bytes_forward_;
  prometheus::Counter& bytes_backward_;
  prometheus::Gauge& train_loss_;
  prometheus::Gauge& validation_loss_;
  prometheus::Gauge& tokens_per_second_;
  prometheus::Counter& checkpoints_;
};

}  // namespace paci
