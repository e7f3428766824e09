#pragma once

// A TrainingJob as the coordinator sees it, and back: the JobSpec submitted
// for it, its name there, the selector that places its stages on its own
// pods; and the coordinator's Job mirrored into the TrainingJob's .status.
// Pure functions: no network, no clock.

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "operator/api/training_job.h"
#include "paci/v1/coordinator.pb.h"
#include "paci/v1/job.pb.h"

namespace paci::op {

// The coordinator's JobSpec for a TrainingJob: spec.model ... spec.runtime
// through the proto3 JSON mapping, runPolicy, the name given, and a worker
// selector that places its stages only on its own pods. Defaults applied and
// validated: InvalidArgument naming the field ("spec.pipeline.num_stages: ...").
// `edit`, when given, changes the spec as written, before the defaults (a
// run of the parity check, parity_step.h).
absl::StatusOr<v1::JobSpec> JobSpecFromTrainingJob(
    const TrainingJob& job, const std::string& coordinator_name,
    const std::function<void(v1::JobSpec*)>& edit = nullptr);

// "<name>-<first 8 of uid>-g<generation>", with "-e<status.evictions>" once
// Kueue has evicted it (kueue.h) and "-p<run>" for a run of its parity check
// (parity_run from 1; 0 for none), shortened to the coordinator's 63
// characters: unique per object and per submission. The form is
// common/operator_job_name.h's (OperatorJobName): the coordinator refuses it
// to tenants, so none can take a TrainingJob's next name first.
std::string CoordinatorJobName(const TrainingJob& job, int parity_run = 0);

// "namespace.name", the value of kWorkerJobLabel (common/peer_identity.h) on
// the job's pods: the label the coordinator places its stages by.
std::string WorkerSelectorValue(const ObjectMeta& metadata);

// The phase of .status for a coordinator phase ("Pending", "Running", ...).
std::string PhaseFromCoordinator(v1::JobPhase phase);

// Copies the coordinator's view of the job into .status.
void MirrorCoordinator(const v1::Job& job, TrainingJobStatus& status);

}  // namespace paci::op
