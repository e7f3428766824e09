#pragma once

#include <string>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace paci {

// The coordinator's Prometheus series (DESIGN.md section 3). Thread-safe.
class CoordinatorMetrics {
 public:
  explicit CoordinatorMetrics(prometheus::Registry& registry);

  void SetJobsInPhase(const std::string& phase, double count);
  void SetWorkers(const std::string& state, double count);
  void AddSubmission() { submissions_.Increment(); }
  void AddRestart() { restarts_.Increment(); }
  void ObserveSchedulingLatency(double seconds) { scheduling_latency_.Observe(seconds); }
  // The latest progress of one job.
  void SetJobProgress(const std::string& job, double step, double train_loss,
                      double validation_loss, double tokens_per_second, double max_drift);

 private:
  prometheus::Family<prometheus::Gauge>& jobs_;
  prometheus::Family<prometheus::Gauge>& workers_;
  prometheus::Counter& submissions_;
  prometheus::Counter& restarts_;
  prometheus::Histogram& scheduling_latency_;
  prometheus::Family<prometheus::Gauge>& job_step_;
  prometheus::Family<prometheus::Gauge>& job_train_loss_;
  prometheus::Family<prometheus::Gauge>& job_validation_loss_;
  prometheus::Family<prometheus::Gauge>& job_tokens_per_second_;
  prometheus::Family<prometheus::Gauge>& job_drift_max_;
};

}  // namespace paci
