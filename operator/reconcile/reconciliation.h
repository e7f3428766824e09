#pragma once

// Internal to the reconcile library (operator/reconcile): not for use outside
// it. The state one ReconcileTrainingJob call shares among its steps
// (training_job_reconciler.cc, dataset_step.cc, kueue_step.cc, parity_step.cc),
// and failing a job. Pure: no network, no clock.

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "kube/object.h"
#include "operator/api/training_job.h"
#include "operator/reconcile/training_job_reconciler.h"
#include "paci/v1/coordinator.pb.h"

namespace paci::op {

// One reconcile: what every step reads (the observation and the parts of the
// object it names) and what the steps build (the desired status, the actions).
// Made by ReconcileTrainingJob for one call and used by it alone: it refers
// to `world` and `options`, which must outlive it.
struct Reconciliation {
  Reconciliation(const TrainingJob& job, const ObservedWorld& world,
                 const ReconcilerOptions& options)
      : world(world),
        options(options),
        job(job),
        spec(job.spec),
        status(job.status),
        generation(job.metadata.generation),
        phase_before(status.phase),
        coordinator_name(status.coordinator_job),
        coordinator(world.coordinator_job ? &*world.coordinator_job : nullptr),
        desired(status) {
    desired.observed_generation = generation;
  }

  // Whether the coordinator knows the job and it has not ended there.
  bool CoordinatorActive() const;
  void Event(const char* type, const std::string& reason, const std::string& message) {
    actions.events.push_back({type, reason, message});
  }

  // Sets condition `type` in the desired status.conditions, keeping its
  // transition time when its truth does not change.
  void SetCondition(const std::string& type, bool value, const std::string& reason,
                    const std::string& message);

  // The reason of condition `type` as observed when its status is `truth`
  // ("True" or "False"); "" otherwise.
  std::string ObservedReason(const std::string& type, const char* truth) const;

  // Clears a condition that was set before; absent ones stay absent.
  void ClearCondition(const std::string& type, const std::string& reason);

  // Deletes every pod of the job not already on its way out; with
  // keep_dataset, all but the dataset initializer's, which ended by itself:
  // its log stays readable (pacictl logs --dataset) until the job goes.
  void DeleteAllPods(bool keep_dataset = false);

  // The job has ended: none of its pods is made or replaced any more, every
  // one but the dataset initializer's is deleted, and nothing is requeued.
  void StopWorkers();

  // Deletes the object once ttlSecondsAfterFinished has passed since it
  // finished (by `finished_status`.completionTime).
  void ApplyTtl(const TrainingJobStatus& finished_status);

  const ObservedWorld& world;
  const ReconcilerOptions& options;
  const TrainingJob& job;            // world.job, read once
  const TrainingJobSpec& spec;       // job.spec
  const TrainingJobStatus& status;   // as observed
  const int64_t generation;
  const std::string phase_before;
  const std::string coordinator_name;  // status.coordinatorJob
  const v1::Job* const coordinator;    // what the coordinator says of it, or nullptr
  TrainingJobStatus desired;           // the status as it should be
  ReconcileActions actions;
};

// The job fails for good: Failed with its condition, its completion time (so
// ttlSecondsAfterFinished counts from it) and a Warning Event.
void FailJob(Reconciliation& r, const std::string& reason, const std::string& message);

}  // namespace paci::op
