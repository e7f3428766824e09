#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "paci/v1/coordinator.pb.h"
#include "server/coordinator_metrics.h"
#include "server/job_queue.h"
#include "server/job_list.h"
#include "server/job_status.h"
#include "server/job_store.h"
#include "server/worker_registry.h"

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
  // Unfinished jobs (queued, running, restarting) held at most; a submission
  // past it is ResourceExhausted. Finished jobs count against retention.
  int max_jobs = 100000;
  // Retention of finished jobs (succeeded, failed, cancelled): past this many
  // the oldest finished are removed (negative: no limit by count) ...
  int64_t finished_jobs_to_keep = 10000;
  // ... and each is removed this long after it finished (InfiniteDuration: no
  // limit by age), or after its spec's run_policy.ttl_seconds_after_finished
  // when that is shorter. Removal deletes the job from the store, logs it and
  // counts it (paci_coordinator_jobs_removed_total); checkpoints are untouched.
  absl::Duration finished_job_ttl = absl::Hours(24 * 7);
};

// The coordinator's jobs and their lifecycle, with no transport. It composes
// the parts that each own one concern, as Ray's GCS server composes its
// managers:
//   - WorkerRegistry: the connected workers, their heartbeats and liveness;
//   - ScheduleJobs: gang scheduling of queued jobs onto idle workers;
//   - job_status.h: the pure rules of a job's status (phases and conditions,
//     applying a stage's report, thinning loss histories);
//   - JobStore: durability.
// What it adds is the lifecycle: placement, restarts from the last complete
// checkpoint with a budget, deadlines, stall detection, recovery after a
// restart of the coordinator. The gRPC services and the ticker call into it.
//
// Thread-safe: one mutex guards the jobs and the registry. It is never held
// while blocking: messages to workers (which only enqueue) are sent, and the
// store is written, after it is released, by Mutate. Store writes are
// serialised on their own mutex and a job's older version is never written
// over a newer one. The only wait under the mutex is WaitForChange's (and
// Submit's, for a concurrent submission of the same name), which release it.
class JobManager {
 public:
  using Clock = std::function<absl::Time()>;
  using Sender = WorkerRegistry::Sender;

  JobManager(JobStore& store, CoordinatorMetrics& metrics, const JobManagerOptions& options,
             Clock clock);

  // Loads the jobs of a previous run from the store. Running jobs wait
  // reconnect_grace for their workers, then restart.
  absl::Status Recover();

  // Accepts a validated spec once it is stored. Idempotent on spec.name: the
  // existing job when the spec is the same, AlreadyExists when it differs;
  // Unavailable when the store refuses it.
  //
  // One store write per submission, made without the lock; submissions that
  // arrive while another write is under way are written together in one
  // transaction (group commit).
  absl::StatusOr<v1::Job> Submit(const v1::JobSpec& spec,
                                 const std::map<std::string, std::string>& labels = {});
  absl::StatusOr<v1::Job> Get(const std::string& name) const;
  // One page of the jobs the query selects, in submission order.
  // InvalidArgument naming page_token for a token that does not parse, was
  // issued for other filters or by an earlier run of the coordinator;
  // naming page_size when it is negative.
  absl::StatusOr<JobPage> List(const JobListQuery& query) const;
  // Every job in that phase (every page; for tests and small stores).
  std::vector<v1::Job> List(v1::JobPhase phase) const;
  // Queued or running jobs end Cancelled and their stages are stopped.
  absl::StatusOr<v1::Job> Cancel(const std::string& name);
  absl::StatusOr<v1::JobTrace> Trace(const std::string& name) const;
  // Blocks up to `timeout` until the job's version exceeds `after_version`;
  // returns the job as it is then. NotFound for an unknown job.
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
  struct StageProgress {
    bool finished = false;
    absl::Time last_progress;
    int64_t last_step = -1;
  };
  // One job as the manager holds it: the record the clients see (and the
  // store keeps) and the attempt's bookkeeping, which is not persisted.
  struct JobState {
    v1::Job job;
    int64_t sequence = 0;
    std::vector<std::string> workers;  // the current attempt's worker per slot (replica * P + stage)
    std::vector<StageProgress> stages;
    CheckpointShards shards;
    absl::Time attempt_started;
    absl::Time queued_since;
    absl::Time last_persisted;
    bool awaiting_reconnect = false;
    absl::Time finished_at = absl::InfinitePast();  // when it ended, for retention
    absl::Time expires_at = absl::InfiniteFuture();
    v1::JobTrace trace;  // this placement's spans, at most trace_max_spans per stage

    v1::JobStatus& status() { return *job.mutable_status(); }
    const v1::JobSpec& spec() const { return job.spec(); }
    const std::string& name() const { return job.name(); }
  };
  // What a change decided under the lock, carried out after it is released.
  struct Effects {
    std::vector<std::pair<Sender, v1::CoordinatorMessage>> messages;
    std::vector<v1::Job> writes;
    std::vector<std::string> deletes;  // jobs removed by retention
  };

  // Runs `body` under the lock, then sends the messages and writes the jobs it
  // queued in pending_, with the lock released.
  template <typename Body>
  void Mutate(Body body) ABSL_LOCKS_EXCLUDED(mu_) {
    Effects effects;
    {
      absl::MutexLock lock(&mu_);
      body();
      EnforceRetentionLocked(clock_());
      effects = TakePendingLocked();
    }
    Carry(effects);
  }
  // The effects queued so far, each job to write as it is now.
  Effects TakePendingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Carry(const Effects& effects) ABSL_LOCKS_EXCLUDED(mu_);
  // What `read` takes from the job of that name, under the lock; NotFound
  // when there is none.
  template <typename Reader, typename T = std::invoke_result_t<Reader, const JobState&>>
  absl::StatusOr<T> Read(const std::string& name, Reader read) const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    const JobState* state = FindLocked(name);
    if (state == nullptr) return JobNotFound(name);
    return read(*state);
  }
  // Writes the jobs (each unless a newer version of it is already written)
  // and removes the named ones. Concurrent calls are written together: the
  // first caller writes every call's jobs in one store transaction while the
  // others wait for its outcome (group commit).
  absl::Status Store(std::vector<v1::Job> puts, std::vector<std::string> deletes,
                     bool fresh = false) ABSL_LOCKS_EXCLUDED(mu_, store_mu_);
  absl::Status Persist(const v1::Job& job) ABSL_LOCKS_EXCLUDED(mu_, store_mu_) {
    return Store({job}, {});
  }
  // A job enters the indexes (sequence, phase, retention) and the gauges.
  JobState& InsertLocked(JobState state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job's phase went from `from` to its current one: indexes and gauges.
  void PhaseChangedLocked(JobState& state, v1::JobPhase from) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A queued or restarting job whose workers all let go joins the queue.
  void EnqueueLocked(JobState& state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EnqueueLocked(const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes finished jobs past the count limit or their age; bounded by the
  // number removed.
  void EnforceRetentionLocked(absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveLocked(int64_t sequence, const std::string& reason) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // A worker that was running a stage before the coordinator restarted.
  void AdoptLocked(WorkerRegistry::Worker& worker) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ScheduleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // worker_ids[replica * P + stage] runs that stage of that replica.
  void PlaceLocked(JobState& state, const std::vector<std::string>& worker_ids)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // What the worker of `slot` is told: its stage and replica, its replica's
  // stage addresses and, with replicas, where its stage's replicas meet.
  v1::StageAssignment AssignmentLocked(const JobState& state,
                                       const std::vector<std::string>& worker_ids, int slot) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The reconnect grace, the deadline and stall detection of one job.
  void CheckTimersLocked(JobState& state, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A stage failed or a worker died: stop the others; restart or fail.
  void FailAttemptLocked(JobState& state, const std::string& reason, const std::string& message,
                         bool permanent) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FinishLocked(JobState& state, v1::JobPhase phase, const std::string& reason,
                    const std::string& message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StopWorkersLocked(JobState& state, const std::string& reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetPhaseLocked(JobState& state, v1::JobPhase phase, const std::string& reason,
                      const std::string& message) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SetConditionLocked(JobState& state, const std::string& type, bool value,
                          const std::string& reason, const std::string& message)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyReportLocked(JobState& state, const v1::StageReport& report)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveWorkerLocked(const std::string& worker_id, const std::string& why)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job changed: a new version for watchers, and a store write, at once
  // or (progress) at most every progress_persist_interval.
  void ChangedLocked(JobState& state, bool persist_now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job finished at `finished`: indexed for retention by count and age.
  void TrackFinishedLocked(JobState& state, absl::Time finished) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UpdateGaugesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  JobState* FindLocked(const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  const JobState* FindLocked(const std::string& name) const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  JobStore& store_;
  CoordinatorMetrics& metrics_;
  const JobManagerOptions options_;
  const Clock clock_;

  mutable absl::Mutex mu_;
  std::map<std::string, JobState> jobs_ ABSL_GUARDED_BY(mu_);
  // Indexes of jobs_ (whose nodes never move): submission order, and the
  // submission order of each phase (ListJobs's pages, the gauges).
  std::map<int64_t, JobState*> by_sequence_ ABSL_GUARDED_BY(mu_);
  std::map<v1::JobPhase, std::set<int64_t>> by_phase_ ABSL_GUARDED_BY(mu_);
  // Running or restarting jobs: the ones with timers for Tick to check.
  std::set<std::string> active_ ABSL_GUARDED_BY(mu_);
  // Finished jobs by (completion, sequence), and by (expiry, sequence).
  std::set<std::pair<absl::Time, int64_t>> finished_ ABSL_GUARDED_BY(mu_);
  std::set<std::pair<absl::Time, int64_t>> expiring_ ABSL_GUARDED_BY(mu_);
  // The jobs waiting for workers.
  JobQueue queue_ ABSL_GUARDED_BY(mu_);
  // Names being written to the store by Submit, not yet in jobs_, and names
  // of removed jobs whose deletion is not yet durable: a submission of such a
  // name waits for it.
  std::set<std::string> submitting_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> removing_ ABSL_GUARDED_BY(mu_);
  // Names this run's page tokens, so one from an earlier run is refused.
  const uint64_t instance_;
  WorkerRegistry workers_ ABSL_GUARDED_BY(mu_);
  int64_t next_sequence_ ABSL_GUARDED_BY(mu_) = 1;
  absl::Time recovered_at_ ABSL_GUARDED_BY(mu_);
  Effects pending_ ABSL_GUARDED_BY(mu_);

  // Group commit, taken without mu_: the batch being gathered, and whether a
  // caller is writing one.
  struct WriteBatch {
    std::vector<v1::Job> puts;
    std::vector<std::string> deletes;
    absl::Status status;
    bool done = false;
  };
  absl::Mutex store_mu_;
  std::shared_ptr<WriteBatch> open_batch_ ABSL_GUARDED_BY(store_mu_);
  bool writing_ ABSL_GUARDED_BY(store_mu_) = false;
  std::map<std::string, int64_t> persisted_version_ ABSL_GUARDED_BY(store_mu_);
  std::deque<std::string> tombstones_ ABSL_GUARDED_BY(store_mu_);  // removed jobs, oldest first
};

}  // namespace paci
