#pragma once

// Internal to the reconcile library (operator/reconcile): the Kueue steps of
// ReconcileTrainingJob for a job labelled kueue.x-k8s.io/queue-name, when the
// operator runs with Kueue (ReconcilerOptions::kueue). The Workload and how
// Kueue's answer reads are kueue.h.

#include <optional>

#include "operator/reconcile/kueue.h"
#include "operator/reconcile/reconciliation.h"

namespace paci::op {

// Before anything of the job runs: the worker pods it may run when it may
// run (`workers.most` when it is not queued; when Kueue admitted its
// Workload, the count admitted, fewer than the most for an elastic job Kueue
// admitted in part). Otherwise nullopt, and the job is held Suspended with
// its Admitted condition (and Suspended's) saying what it waits for: the
// Workload is made; Kueue's reason while it waits for quota, or a LocalQueue
// or WorkloadPriorityClass that does not exist; after an eviction, the job
// is stopped and, once its pods are gone, the quota given back.
std::optional<int> KueueAdmits(Reconciliation& r, WorkerCount workers);

// A finished job's Workload is marked Finished, which frees its quota.
void FinishWorkload(Reconciliation& r);

// A job suspended by its spec gives its quota back: the Workload goes (and
// is made again when it resumes).
void DropWorkload(Reconciliation& r);

}  // namespace paci::op
