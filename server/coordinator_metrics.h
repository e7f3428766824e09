#pragma once

#include <string>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

namespace paci {

// The coordinator's Prometheus series: its own (jobs by phase, workers by
// state, submissions, scheduling latency) and, per job, the job's progress,
// labelled training_job (the job's name; not `job`, which is the scrape
// target's label). Rates (tokens per second) are Prometheus's to derive from
// the workers' counters. Thread-safe.
class CoordinatorMetrics {
 public:
  explicit CoordinatorMetrics(prometheus::Registry& registry);

  // phase: the job phase as the TrainingJob's status spells it ("Queued",
  // "Running", "Restarting", "Succeeded", "Failed", "Cancelled").
  void SetJobsInPhase(const std::string& phase, double count);
  void SetWorkers(const std::string& state, double count);
  void AddSubmission() { submissions_.Increment(); }
  // A batch of store writes failed (the jobs are written again on their next change).
  void AddStoreError() { store_errors_.Increment(); }
  void ObserveSchedulingLatency(double seconds) { scheduling_latency_.Observe(seconds); }
  // Creates a job's series (its restart counter at 0), so the first restart
  // is an increase Prometheus sees. Called at a job's first placement, so a
  // queue of waiting jobs adds no series.
  void TrackJob(const std::string& training_job);
  void AddRestart(const std::string& training_job);
  // The job was removed by retention (reason "count" or "age"): its series go.
  void RemoveJob(const std::string& training_job, const std::string& reason);
  // The latest progress of one job.
  void SetJobProgress(const std::string& training_job, double step, double train_loss,
                      double validation_loss);
  // The shape a job runs at (P stages x R replicas), set at each placement;
  // an elastic job's changes of shape and the seconds from each decision to
  // its placement (created at 0 with the job's other series).
  void SetJobShape(const std::string& training_job, int stages, int replicas);
  void AddResize(const std::string& training_job);
  void AddResizeSeconds(const std::string& training_job, double seconds);

 private:
  prometheus::Family<prometheus::Gauge>& jobs_;
  prometheus::Family<prometheus::Gauge>& workers_;
  prometheus::Counter& submissions_;
  prometheus::Histogram& scheduling_latency_;
  prometheus::Family<prometheus::Counter>& removals_;
  prometheus::Counter& store_errors_;
  prometheus::Family<prometheus::Counter>& job_restarts_;
  prometheus::Family<prometheus::Gauge>& job_step_;
  prometheus::Family<prometheus::Gauge>& job_train_loss_;
  prometheus::Family<prometheus::Gauge>& job_validation_loss_;
  prometheus::Family<prometheus::Gauge>& job_stages_;
  prometheus::Family<prometheus::Gauge>& job_replicas_;
  prometheus::Family<prometheus::Counter>& job_resizes_;
  prometheus::Family<prometheus::Counter>& job_resize_seconds_;
};

}  // namespace paci
