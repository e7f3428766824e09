#pragma once

// The operator's Prometheus metrics: reconciles by result and their latency,
// leadership, Kubernetes requests by verb and code, watch restarts, queue
// depth, and per TrainingJob its phase and the coordinator job it runs as
// (an info series, so dashboards join the coordinator's and workers' series,
// labelled training_job, to the TrainingJob's namespace and name). The
// progress of a job (step, loss, throughput) is the coordinator's and the
// workers' to export, not repeated here. Thread-safe.

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kube/kube_client.h"

namespace paci::op {

class OperatorMetrics : public kube::KubeRequestObserver {
 public:
  OperatorMetrics();

  std::shared_ptr<prometheus::Registry> registry() const { return registry_; }

  void OnRequest(const std::string& verb, int code) override;
  void WatchRestarted(const std::string& resource, const std::string& reason);
  // result: "success", "error" or "requeue".
  void RecordReconcile(const std::string& result, absl::Duration took);
  void SetLeader(bool leader);
  void SetQueueDepth(size_t depth);
  // One TrainingJob as its series show it.
  struct TrainingJob {
    std::string ns;
    std::string name;
    std::string phase;            // "Pending" before the first status
    std::string coordinator_job;  // .status.coordinatorJob; empty before the submission
  };
  // The series of one TrainingJob, as the operator last reconciled it:
  // paci_operator_trainingjob_info{namespace,trainingjob,training_job} 1 (the
  // series of its previous coordinator job removed) and
  // paci_operator_trainingjob_status_phase{namespace,trainingjob,phase}, 1
  // for its phase and 0 for the others. Per job, so that a reconcile costs
  // the same however many jobs there are.
  void SetTrainingJob(const TrainingJob& job);
  // A TrainingJob that is gone leaves no series.
  void RemoveTrainingJob(const std::string& ns, const std::string& name);

  // The phases of a TrainingJob's status.
  static const std::vector<std::string>& Phases();

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>& reconciles_;
  prometheus::Histogram& reconcile_duration_;
  prometheus::Gauge& leader_;
  prometheus::Family<prometheus::Counter>& kube_requests_;
  prometheus::Family<prometheus::Counter>& watch_restarts_;
  prometheus::Gauge& queue_depth_;
  prometheus::Family<prometheus::Gauge>& job_info_;
  prometheus::Family<prometheus::Gauge>& job_phase_;
  absl::Mutex jobs_mutex_;
  // namespace/name -> what its series show now.
  std::map<std::string, TrainingJob> jobs_ ABSL_GUARDED_BY(jobs_mutex_);
};

}  // namespace paci::op
