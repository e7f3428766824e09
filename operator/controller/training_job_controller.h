#pragma once

// Runs the TrainingJob reconcile against a cluster: informers keep
// TrainingJobs and the pods, Services (NetworkPolicies, Kueue Workloads) they
// own in memory, a rate-limited
// work queue feeds job keys to worker threads, and each worker observes the
// world (cache + coordinator), calls ReconcileTrainingJob and has an
// ActionExecutor carry out its actions.
//
// Owns its informers and threads: Start, then Stop (or the destructor).

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "operator/controller/action_executor.h"
#include "operator/controller/coordinator_jobs.h"
#include "operator/controller/manager.h"
#include "operator/controller/work_queue.h"
#include "kube/informer.h"
#include "kube/kube_client.h"
#include "operator/operator_metrics.h"
#include "operator/reconcile/training_job_reconciler.h"

namespace paci::op {

struct ControllerOptions {
  std::string watch_namespace;  // empty: every namespace
  ReconcilerOptions reconciler;
  int workers = 2;
  std::string component = "paci-operator";  // the source of its Events
  int watch_timeout_seconds = 300;
  // Times the reconciles (ObservedWorld::now), Events and requeues.
  Clock* clock = &Clock::Real();
};

// The leader-only part of the operator (Manager runs it while this replica leads).
class TrainingJobController final : public LeaderRunnable {
 public:
  TrainingJobController(kube::KubeClient& kube, CoordinatorJobs& coordinator,
                        OperatorMetrics& metrics,
                        ControllerOptions options);
  ~TrainingJobController() override;
  TrainingJobController(const TrainingJobController&) = delete;
  TrainingJobController& operator=(const TrainingJobController&) = delete;

  // Starts the informers, waits for their first lists, then the workers.
  // Unavailable when the caches do not fill within `sync_timeout` (a minute
  // for Start()).
  absl::Status Start(absl::Duration sync_timeout);
  absl::Status Start() override { return Start(absl::Seconds(60)); }
  // Stops the workers and informers and joins them. Idempotent.
  void Stop() override;
  bool synced() const { return synced_.load(); }
  bool Ready() const override { return synced(); }

 private:
  void Enqueue(const nlohmann::json& object, bool owned);
  void Work();
  // Reconciles "namespace/name"; sets *requeue_after when it should run again.
  absl::Status ReconcileKey(const std::string& key, std::optional<absl::Duration>* requeue_after);
  // The TrainingJob as last seen: the cache's copy, or ours when the cache
  // has not seen our last write yet. nullopt when it is gone.
  std::optional<nlohmann::json> LatestJob(const std::string& key, const std::string& ns,
                                          const std::string& name);
  // The pods and Service of `job` from the caches, and its coordinator job.
  absl::StatusOr<ObservedWorld> Observe(nlohmann::json job, const std::string& ns,
                                        const std::string& name);
  // Adds the nodes and the cluster's unfinished pods to `world`, for the gang
  // gate (gang.h); a pod this operator released that the cache still shows
  // at the gate appears released.
  void ObserveCluster(ObservedWorld& world) ABSL_EXCLUSIVE_LOCKS_REQUIRED(gang_mutex_);
  // Reconciles `world` and carries the actions out; adds the pods it
  // released from the gang gate (their uids) to *released when given.
  absl::Status ReconcileWorld(const std::string& key, const nlohmann::json& job,
                              ObservedWorld world, std::optional<absl::Duration>* requeue_after,
                              std::vector<std::string>* released);

  kube::KubeClient& kube_;
  CoordinatorJobs& coordinator_;
  OperatorMetrics& metrics_;
  const ControllerOptions options_;
  Clock& clock_;

  WorkQueue queue_;
  ActionExecutor executor_;
  std::unique_ptr<kube::Informer> jobs_;
  std::unique_ptr<kube::Informer> pods_;
  std::unique_ptr<kube::Informer> services_;
  // null with options_.reconciler.network_policies off
  std::unique_ptr<kube::Informer> network_policies_;
  std::unique_ptr<kube::Informer> workloads_;         // null with options_.reconciler.kueue off
  // For the gang gate: every Node, and every unfinished pod of the cluster.
  std::unique_ptr<kube::Informer> nodes_;
  std::unique_ptr<kube::Informer> cluster_pods_;
  // One gang decision at a time, each seeing the pods the ones before it
  // released, also while the pod cache still shows them at the gate: per
  // pod uid (a replacement of the same name is another pod), when it was
  // released.
  absl::Mutex gang_mutex_;
  std::map<std::string, absl::Time> released_ ABSL_GUARDED_BY(gang_mutex_);
  std::vector<std::thread> workers_;
  // The informer's copy lags behind our own writes. Per key, the object as
  // we last wrote it; while the cache holds an older version, reconciles
  // start from what we wrote (else a second reconcile would see the old
  // phase and repeat its Events).
  absl::Mutex written_mutex_;
  std::map<std::string, nlohmann::json> written_ ABSL_GUARDED_BY(written_mutex_);
  std::atomic<bool> synced_{false};
  std::atomic<bool> stopped_{false};
};

}  // namespace paci::op
