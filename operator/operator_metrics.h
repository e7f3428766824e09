#pragma once

// The operator's Prometheus metrics: reconciles by result and their latency,
// TrainingJobs by phase, leadership, Kubernetes requests by verb and code,
// watch restarts, queue depth, and the progress it mirrors per TrainingJob.
// Thread-safe (prometheus-cpp metrics are).

#include <map>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "operator/kube/kube_client.h"

namespace paci::op {

class OperatorMetrics : public KubeRequestObserver {
 public:
  OperatorMetrics();

  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  void OnRequest(const std::string& verb, int code) override;
  void WatchRestarted(const std::string& resource, const std::string& reason);
  // result: "success", "error" or "requeue".
  void RecordReconcile(const std::string& result, absl::Duration took);
  void SetLeader(bool leader);
  void SetQueueDepth(size_t depth);
  // Every TrainingJob phase gets a value (0 when no job is in it).
  void SetJobPhases(const std::map<std::string, int>& counts);
  // Mirrors step, losses, drift and tokens/s from a TrainingJob's .status.
  void SetJob(const std::string& ns, const std::string& name, const nlohmann::json& status);
  void RemoveJob(const std::string& ns, const std::string& name);

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& reconciles_;
  prometheus::Histogram& reconcile_duration_;
  prometheus::Family<prometheus::Gauge>& jobs_;
  prometheus::Gauge& leader_;
  prometheus::Family<prometheus::Counter>& kube_requests_;
  prometheus::Family<prometheus::Counter>& watch_restarts_;
  prometheus::Gauge& queue_depth_;
  prometheus::Family<prometheus::Gauge>& job_step_;
  prometheus::Family<prometheus::Gauge>& job_train_loss_;
  prometheus::Family<prometheus::Gauge>& job_validation_loss_;
  prometheus::Family<prometheus::Gauge>& job_drift_;
  prometheus::Family<prometheus::Gauge>& job_tokens_per_second_;
};

}  // namespace paci::op
