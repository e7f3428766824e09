#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "paci/v1/coordinator.pb.h"
#include "server/job_scheduler.h"
#include "server/job_table.h"
#include "server/worker_registry.h"

namespace paci {

// What a job's placement is, as pure functions over a JobState and the
// connected workers: its slots, the attempt a placement starts and what each
// worker is told. The JobManager decides when; these say what.

// Where a stage of a replica is kept: JobState::workers, JobState::stages and
// the status' stages, replica * P + stage; -1 when it is out of the job's range.
int SlotOf(const v1::JobSpec& spec, int stage, int replica);
// "stage 1", or "stage 1 replica 2" with replicas, for messages.
std::string SlotName(const v1::JobSpec& spec, int slot);

// The job as the scheduler's queue holds it. Its selector asks, besides its
// run_policy.worker_selector, for its namespace as the worker's
// kNamespaceLabel (WorkerRegistry::SchedulingLabels): a job runs on the
// workers of its own namespace only, whatever its selector says, and a job of
// none on the workers of none.
PendingJob AsPending(const v1::Job& job, int64_t sequence);

// OK when a worker of these scheduling labels (WorkerRegistry::
// SchedulingLabels) is one the job could have been placed on: it matches the
// selector AsPending gives the job, its namespace first. Else
// PermissionDenied naming register.running.job_name, for a worker that claims
// to run a stage of it.
absl::Status CheckMayRun(const v1::Job& job,
                         const std::map<std::string, std::string>& worker_labels);

// A new attempt on `worker_ids` (slot order) at `now`: the attempt number,
// the per-slot progress and trace, the status' stages with each worker's
// addresses, and a new link secret. Every worker must be connected.
void StartAttempt(JobState& state, const WorkerRegistry& workers,
                  const std::vector<std::string>& worker_ids, absl::Time now);

// A job as a new run of the coordinator loads it at `now`: a running one
// waits for its workers to come back (awaiting_reconnect), with every slot
// empty; its last checkpoint counts as complete on every stage.
JobState RecoveredJob(v1::Job job, absl::Time now);

// What the worker of `slot` is told for the state's current attempt: its
// stage and replica, its replica's stage addresses and, with replicas, where
// its stage's replicas meet under a key no other placement shares (this
// coordinator run `instance`, the job's submission, its attempt).
v1::StageAssignment AssignmentFor(const JobState& state, const WorkerRegistry& workers,
                                  uint64_t instance, int slot);

// The unfinished stages that made no progress for longer than `timeout`.
std::vector<std::string> StalledStages(const JobState& state, absl::Time now,
                                       absl::Duration timeout);

}  // namespace paci
