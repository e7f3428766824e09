#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "paci/v1/coordinator.pb.h"

namespace paci {

// The rules of a job's status as pure functions, in the manner of
// ScheduleJobs: no lock, no clock, no store, no transport. The JobManager
// owns a job's state and calls these to change it.

// Every phase a job can be in, in the order the gauges list them.
inline constexpr v1::JobPhase kJobPhases[] = {v1::QUEUED,    v1::RUNNING, v1::RESTARTING,
                                              v1::SUCCEEDED, v1::FAILED,  v1::CANCELLED};

// A job status' times (google.protobuf.Timestamp) and absl::Time, to the microsecond.
google::protobuf::Timestamp ToProto(absl::Time t);
absl::Time FromProto(const google::protobuf::Timestamp& t);

// A phase as the job's conditions, the TrainingJob's status and the
// paci_coordinator_jobs{phase} label spell it ("Queued", "Running", ...).
const char* PhaseName(v1::JobPhase phase);

// A submitted job as it is first stored: queued, version 1.
v1::Job NewJob(const v1::JobSpec& spec, const std::map<std::string, std::string>& labels,
               absl::Time now);
// Whether a submission of `spec` with `labels` repeats the job's own (the
// same spec and labels): Submit is then idempotent.
bool SameSubmission(const v1::Job& job, const v1::JobSpec& spec,
                    const std::map<std::string, std::string>& labels);

// Whether a stage's error (an absl::StatusCode) would meet another attempt
// again, a bad spec or checkpoint: the job then fails instead of restarting.
bool IsPermanentError(int code);

// The one answer for a job name the coordinator does not hold.
absl::Status JobNotFound(const std::string& name);

// Sets condition `type`. A condition that never held is not listed while
// false; the transition time moves only when the value flips. Returns whether
// the status changed.
bool SetCondition(v1::JobStatus& status, const std::string& type, bool value,
                  const std::string& reason, const std::string& message, absl::Time now);

// Sets the phase with its reason and message, and the phase conditions: the
// new phase's true, every other phase condition that held false. Returns
// whether a condition changed (the phase fields are always written).
bool SetPhase(v1::JobStatus& status, v1::JobPhase phase, const std::string& reason,
              const std::string& message, absl::Time now);

// Keeps a loss history bounded, so a job stays far below gRPC's 4 MiB message
// limit however long it trains: past max_points, every other point is dropped,
// the latest always kept. Old training is then seen coarser.
inline constexpr int kMaxLossHistory = 10000;
void ThinLossHistory(google::protobuf::RepeatedPtrField<v1::LossPoint>* points,
                     int max_points = kMaxLossHistory);

// Appends a loss point to a history kept in increasing step order with one
// point per step: points at or past its step (an earlier attempt's, trained
// again after a restart from a checkpoint) are dropped first, so the history
// holds the surviving attempt's values.
void AppendLossPoint(const v1::LossPoint& point,
                     google::protobuf::RepeatedPtrField<v1::LossPoint>* history);

// Checkpoint step -> the stages that reported saving their shard of it.
using CheckpointShards = std::map<int64_t, std::set<int>>;

// The stages P of a status whose stages() hold P x R entries (replica * P +
// stage): those of replica 0.
int NumStages(const v1::JobStatus& status);

// Applies one stage's report to the job's status: the counters, drift and
// weights hash of its entry (replica * P + stage), the loss histories
// (thinned; replica 0's), the job's step (its slowest stage's), tokens per
// second (counted at the last stage of every replica over the attempt's time
// so far), and the newest checkpoint step that every stage has saved
// (replica 0's shards, recorded in `shards`). A report whose stage and
// replica name no entry is ignored.
void ApplyStageReport(const v1::StageReport& report, absl::Duration attempt_elapsed,
                      v1::JobStatus& status, CheckpointShards& shards);

// Appends the report's spans to its stage's trace, at most max_spans in all;
// what does not fit is counted as dropped.
void AppendStageSpans(const v1::StageReport& report, int64_t max_spans, v1::StageTrace& trace);

}  // namespace paci
