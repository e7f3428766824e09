#pragma once

// Carries out what ReconcileTrainingJob decided, against the cluster and the
// coordinator: the finalizer, cancel, pods and Service, the submit, Events,
// the status (409 retried with a fresh read), deletion after the TTL. The
// stateful glue between the pure reconcile and the world; it decides
// nothing. A submit's answer goes back to the reconciler (see
// training_job_reconciler.h), and what that second call says is what it
// reports.
//
// Thread-safe as its clients are: TrainingJobController's workers share one.

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "operator/controller/coordinator_jobs.h"
#include "kube/kube_client.h"
#include "operator/reconcile/training_job_reconciler.h"

namespace paci::op {

class ActionExecutor {
 public:
  // `component` is the source of its Events; `clock` times them.
  ActionExecutor(kube::KubeClient& kube, CoordinatorJobs& coordinator, ReconcilerOptions reconciler,
                 std::string component, Clock& clock = Clock::Real());

  struct Result {
    // OK when every action was carried out; else the first that failed, or
    // ReconcileActions::retry_error.
    absl::Status status;
    // The object as this last wrote it (the observed one when it wrote
    // nothing), for a reconcile that comes before the cache has seen it.
    nlohmann::json written;
    // When to reconcile again, by the actions that were carried out.
    std::optional<absl::Duration> requeue_after;
  };

  // Carries out `actions`, which ReconcileTrainingJob gave for `world`.
  Result Execute(ObservedWorld world, ReconcileActions actions);

 private:
  // The changes: finalizer, cancel, pods, Service, Workload. `current`
  // follows the object as written.
  absl::Status MakeChanges(const ObservedWorld& world, const ReconcileActions& actions,
                           nlohmann::json& current);
  // The report: Events, status, then the finalizer's removal and the TTL.
  absl::Status Report(const ReconcileActions& actions, nlohmann::json& current);
  void RecordEvent(const nlohmann::json& job, const KubeEvent& event);

  kube::KubeClient& kube_;
  CoordinatorJobs& coordinator_;
  const ReconcilerOptions reconciler_;
  const std::string component_;
  Clock& clock_;
};

}  // namespace paci::op
