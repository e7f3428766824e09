#pragma once

// Internal to the reconcile library (operator/reconcile): a TrainingJob's
// spec.parity, the loss-parity check (common/parity.h) on its own worker
// pods. Instead of one training run the job trains, for each seed of
// spec.parity.seeds, itself and then its flush twin for spec.parity.steps
// steps (spec.training.steps when 0 or absent), one coordinator job after the
// other on the same pods (so the two see the same machines), and ends
// Succeeded with the gap and the speed-ups in status.parity:
//
//   status.parity.run, totalRuns   the run under way (from 1) and how many
//   status.parity.runs[]           each finished run: its seed and role (job
//                                  or flush), its coordinator job, tokens/s,
//                                  final validation loss and validation curve
//   status.parity.meanGapPercent, gapSpreadPercent, throughputRatio,
//   speedupTo75, speedupToFinal, seeds[]   the report, once every run ended
//
// No checkpoint is read or written. A run that fails fails the job.

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "operator/reconcile/reconciliation.h"
#include "paci/v1/job.pb.h"

namespace paci::op {

// One run of the check.
struct ParityRun {
  int number = 0;  // from 1
  int total = 0;   // 2 per seed
  int seed = 0;
  bool flush = false;  // the flush twin, else the job itself
  // The digest of the spec the runs train (ParitySpecDigest), and whether
  // status.parity holds runs of another one (recorded before a suspended job
  // was edited): they are dropped and the check starts over.
  std::string spec_digest;
  bool restart = false;
};

// A digest of the job's spec as the coordinator gets it (defaults applied),
// but for what differs from run to run (its name) and what the runs do not
// train by (the run policy, the checkpoint).
std::string ParitySpecDigest(const v1::JobSpec& job_spec);

// The run after those status.parity.runs records of the spec of that digest
// (the first when they are another's). The spec's parity_error when
// spec.parity.seeds or spec.parity.steps are not what the schema allows (an
// object written before the schema had them); OutOfRange when every run has
// been recorded (the job has then Succeeded).
absl::StatusOr<ParityRun> NextParityRun(const TrainingJobSpec& spec,
                                        const TrainingJobStatus& status,
                                        const std::string& spec_digest);

// What the run changes in the spec as written (before the defaults): the
// edit JobSpecFromTrainingJob applies.
std::function<void(v1::JobSpec*)> ParityRunEdit(const ParityRun& run, const ParitySpec& parity);

// Submitting `run`: status.parity says which run is under way (and loses the
// runs of another spec, with a ParityRestarted Event).
void StartParityRun(Reconciliation& r, const ParityRun& run);

// The coordinator says the run under way (r.coordinator) ended in `phase`.
// Returns true when this step has decided the job's status: the run
// Succeeded, is recorded in status.parity.runs and runs are left (the job
// stays Running, status.coordinatorJob is cleared so that the next run is
// submitted at once), or the check failed (a run without a validation loss,
// a report that cannot be made: the job Failed, its workers stopped). False
// when the job ends as the coordinator's job did: the run failed, or it was
// the last and the report is written (status.parity, an Event).
bool ParityRunEnded(Reconciliation& r, const std::string& phase, const ParityRun& run);

// The Succeeded condition's message of a finished check ("" when the job
// has none): the gap, its spread, the throughput ratio and the speed-ups.
std::string ParityOutcome(const Reconciliation& r);

}  // namespace paci::op
