#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace paci {

// The Prometheus series of one stage, labelled training_job (the coordinator's
// job name; not `job`, which is the scrape target's label), stage and replica
// (pipeline.data_parallel; "0" with one): counters
// and the drift histogram, from which Prometheus derives rates. The job's loss
// and step are the coordinator's series (paci_job_*), not repeated here.
// Thread-safe (prometheus-cpp metrics are).
class StageMetrics {
 public:
  // drift_bound: this stage's ceil((P-1-s)/a); drift_limit: the job's D
  // (pipeline.max_drift, or what a gives), the same on every stage.
  StageMetrics(prometheus::Registry& registry, const std::string& training_job, int stage,
               int replica, int num_stages, int64_t drift_bound, int64_t drift_limit);

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
  void AddCheckpoint() { checkpoints_.Increment(); }
  // The L2 norm of the stage's gradients at its last step, before clipping.
  void SetGradientNorm(double norm) { gradient_norm_.Set(norm); }
  void AddNonfiniteSkip() { nonfinite_skipped_.Increment(); }
  // One optimizer step's gradient all-reduce with the other replicas.
  void ObserveAllReduce(double seconds) { allreduce_.Observe(seconds); }

 private:
  StageMetrics(prometheus::Registry& registry, const std::map<std::string, std::string>& labels,
               int num_stages, int64_t drift_bound, int64_t drift_limit);

  prometheus::Histogram& drift_;
  prometheus::Gauge& drift_bound_;
  prometheus::Gauge& drift_limit_;
  prometheus::Counter& forward_;
  prometheus::Counter& backward_;
  prometheus::Counter& tokens_;
  prometheus::Counter& steps_;
  prometheus::Counter& busy_;
  prometheus::Counter& idle_;
  prometheus::Counter& bytes_forward_;
  prometheus::Counter& bytes_backward_;
  prometheus::Counter& checkpoints_;
  prometheus::Gauge& gradient_norm_;
  prometheus::Counter& nonfinite_skipped_;
  prometheus::Histogram& allreduce_;
};

}  // namespace paci
