#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/job_phase.h"
#include "common/run_id.h"
#include "paci/v1/coordinator.pb.h"
#include "server/coordinator_metrics.h"
#include "server/job_store.h"

namespace paci {

struct JobManagerOptions {
  // A worker that sends nothing for this long is dead.
  absl::Duration heartbeat_timeout = absl::Seconds(5);
  // A running stage whose step does not move for this long is reported stalled.
  absl::Duration stall_timeout = absl::Seconds(120);
  // After a restart of the coordinator: how long the workers of running jobs
  // have to come back before their jobs are restarted.
  absl::Duration reconnect_grace = absl::Seconds(10);
  // Persist progress (not phase changes, which are immediate) at most this often.
  absl::Duration progress_persist_interval = absl::Seconds(1);
  int max_jobs = 10000;
};

// The coordinator's state and rules, with no transport: jobs (durable in the
// JobStore), registered workers, gang scheduling (ScheduleJobs), heartbeats,
// restarts from the last complete checkpoint with a budget, deadlines, stall
// detection, and the progress of each job aggregated from its stages'
// reports. The gRPC services and the ticker thread call into it.
//
// Thread-safe: one mutex; it is never held while calling a worker's Sender
// (which only enqueues) nor while blocking, except in WaitForChange's wait.
class JobManager {
 public:
  using Clock = std::function<absl::Time()>;
  // Enqueues a message to one worker; must not block.
  using Sender = std::function<void(const v1::CoordinatorMessage&)>;

  JobManager(JobStore& store, CoordinatorMetrics& metrics, const JobManagerOptions& options,
             Clock clock);

  // Loads the jobs of a previous run from the store. Running jobs wait
  // reconnect_grace for their workers, then restart.
  absl::Status Recover();

  // Accepts a validated spec. Idempotent on spec.name: the existing job when
  // the spec is the same, AlreadyExists when it differs.
  absl::StatusOr<v1::Job> Submit(const v1::JobSpec& spec);
  absl::StatusOr<v1::Job> Get(const std::string& name) const;
  std::vector<v1::Job> List(v1::JobPhase phase) const;
  // Queued or running jobs end Cancelled and their stages are stopped.
  absl::StatusOr<v1::Job> Cancel(const std::string& name);
  // Blocks up to `timeout` until the job's version exceeds `after_version`;
  // returns the job as it is then. NotFound for an unknown job.
  absl::StatusOr<v1::JobTrace> Trace(const std::string& name) const;
  absl::StatusOr<v1::Job> WaitForChange(const std::string& name, int64_t after_version,
                                        absl::Duration timeout) const;

  // A worker's stream opened. AlreadyExists if that id is connected.
  absl::Status Connect(const v1::WorkerRegistration& registration, Sender sender);
  void OnHeartbeat(const std::string& worker_id);
  void OnReport(const std::string& worker_id, const v1::StageReport& report);
  void Disconnect(const std::string& worker_id);

  // Heartbeat timeouts, deadlines, stalls, the end of the reconnect grace,
  // then scheduling. Called by a ticker; also after every event.
  void Tick();

  size_t connected_workers() const;

 private:
  struct Worker {
    v1::WorkerRegistration registration;
    Sender sender;
    absl::Time last_seen;
    std::string job;       // the job it runs or is stopping, "" when idle
    int64_t attempt = 0;
    int stage = -1;
    bool stopping = false;  // told to stop; idle once it reports its end
  };
  struct StageProgress {
    v1::StageReport latest;
    bool finished = false;
    absl::Time last_progress;
    int64_t last_step = -1;
  };
  struct JobState {
    v1::Job job;
    int64_t sequence = 0;
    std::vector<std::string> workers;  // the current attempt's worker per stage
    std::vector<StageProgress> stages;
    std::map<int64_t, std::set<int>> shards;  // step -> stages that saved it
    absl::Time attempt_started;
    absl::Time queued_since;
    absl::Time last_persisted;
    bool awaiting_reconnect = false;
    v1::JobTrace trace;  // this placement's spans, at most trace_max_spans per stage
  };

  void ScheduleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PlaceLocked(JobState& job, const std::vector<std::string>& worker_ids)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A stage failed or a worker died: stop the others; restart or fail.
  void FailAttemptLocked(JobState& job, const std::string& reason, const std::string& message,
                         bool permanent) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishLocked(JobState& job, v1::JobPhase phase, const std::string& reason,
                    const std::string& message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StopWorkersLocked(JobState& job, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetPhaseLocked(JobState& job, v1::JobPhase phase, const std::string& reason,
                      const std::string& message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetConditionLocked(JobState& job, const std::string& type, bool status,
                          const std::string& reason, const std::string& message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyReportLocked(JobState& job, const v1::StageReport& report)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveWorkerLocked(const std::string& worker_id, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ChangedLocked(JobState& job, bool persist_now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateGaugesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Send(const std::vector<std::pair<Sender, v1::CoordinatorMessage>>& messages);
  // Runs `body` under the lock, then sends what it queued in outbox_ with
  // the lock released.
  template <typename Body>
  void LockedThenSend(Body body) {
    std::vector<std::pair<Sender, v1::CoordinatorMessage>> to_send;
    {
      absl::MutexLock lock(&mu_);
      body();
      to_send.swap(outbox_);
    }
    Send(to_send);
  }

  JobStore& store_;
  CoordinatorMetrics& metrics_;
  const JobManagerOptions options_;
  const Clock clock_;

  mutable absl::Mutex mu_;
  std::map<std::string, JobState> jobs_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, Worker> workers_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> worker_order_ ABSL_GUARDED_BY(mu_);  // registration order
  int64_t next_sequence_ ABSL_GUARDED_BY(mu_) = 1;
  absl::Time recovered_at_ ABSL_GUARDED_BY(mu_);
  // Messages decided under the lock, sent after it is released.
  std::vector<std::pair<Sender, v1::CoordinatorMessage>> outbox_ ABSL_GUARDED_BY(mu_);
};

}  // namespace paci
