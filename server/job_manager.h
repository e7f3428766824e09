#pragma once

#include <cstdint>
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
#include "common/clock.h"
#include "common/elastic_shape.h"
#include "server/coordinator_metrics.h"
#include "server/group_commit_store.h"
#include "server/job_queue.h"
#include "server/job_list.h"
#include "server/job_status.h"
#include "server/job_store.h"
#include "server/job_table.h"
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
  // Jobs held of one namespace (labelled kNamespaceLabel, common/
  // peer_identity.h: a tenant's, or the operator's for a TrainingJob of that
  // namespace), finished ones included until retention removes them; a
  // submission past it is ResourceExhausted naming the namespace. Jobs of no
  // namespace count against max_jobs only.
  int max_jobs_per_namespace = 1000;
  // Retention of finished jobs. Removal deletes the job from the store, logs
  // it and counts it (paci_coordinator_jobs_removed_total); checkpoints are
  // untouched.
  RetentionPolicy retention;
};

// The coordinator's jobs and their lifecycle, with no transport. It composes
// the parts that each own one concern, as Ray's GCS server composes its
// managers:
//   - WorkerRegistry: the connected workers, their heartbeats and liveness;
//   - ScheduleJobs: gang scheduling of queued jobs onto idle workers;
//   - job_status.h: the pure rules of a job's status (phases and conditions,
//     applying a stage's report, thinning loss histories);
//   - JobTable: the jobs in memory, their indexes, retention and paging;
//   - GroupCommitStore over a JobStore: durability, concurrent writes
//     gathered into one transaction, never an older version over a newer.
// What it adds is the lifecycle: placement, restarts from the last complete
// checkpoint with a budget, deadlines, stall detection, recovery after a
// restart of the coordinator. The gRPC services and the ticker call into it.
//
// Thread-safe: one mutex guards the jobs and the registry; the workers'
// last-seen times (WorkerLiveness) have their own, so heartbeats never take
// the JobManager's. It is never held
// while blocking: messages to workers (which only enqueue) are sent, and the
// store is written, after it is released, by Mutate. The only wait under the
// mutex is WaitForChange's (and Submit's, for a concurrent submission of the
// same name), which release it. Time is the injected Clock's.
class JobManager {
 public:
  using Sender = WorkerRegistry::Sender;

  JobManager(JobStore& store, CoordinatorMetrics& metrics, const JobManagerOptions& options,
             Clock& clock = Clock::Real());

  // Loads the jobs of a previous run from the store. Running jobs wait
  // reconnect_grace for their workers, then restart.
  absl::Status Recover();

  // Accepts a validated spec once it is stored. Idempotent on spec.name: the
  // existing job when the spec is the same, AlreadyExists when it differs;
  // ResourceExhausted past max_jobs, or past max_jobs_per_namespace for a job
  // whose labels name a namespace; Unavailable when the store refuses it.
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
  // Queued or running jobs end Cancelled and their stages are stopped. The
  // job is stored before the answer (a cancelled one again, so a retry after
  // a refused write stores it): Unavailable when the store refuses, and the
  // job is then Cancelled only until this coordinator restarts.
  absl::StatusOr<v1::Job> Cancel(const std::string& name);
  // Replaces the run policy of a job that has not finished (a validated one:
  // CoordinatorService checks it). NotFound; FailedPrecondition for a
  // finished job or another worker selector.
  absl::StatusOr<v1::Job> UpdateRunPolicy(const std::string& name, const v1::RunPolicy& policy);
  absl::StatusOr<v1::JobTrace> Trace(const std::string& name) const;
  // Blocks up to `timeout` until the job's version exceeds `after_version`;
  // returns the job as it is then. NotFound for an unknown job.
  absl::StatusOr<v1::Job> WaitForChange(const std::string& name, int64_t after_version,
                                        absl::Duration timeout) const;

  // A worker's stream opened; it is placed on the jobs of namespace
  // `name_space` only ("": those of none), as its certificate says
  // (WorkerNamespace). AlreadyExists if that id is connected;
  // PermissionDenied naming register.running.job_name, with nothing changed,
  // when it claims to run a stage of a job (this very job, by its create
  // time) it could never have been placed on: another namespace's, or one
  // whose selector it does not match.
  absl::Status Connect(const v1::WorkerRegistration& registration, Sender sender,
                       const std::string& name_space = "");
  void OnHeartbeat(const std::string& worker_id) ABSL_LOCKS_EXCLUDED(mu_);
  void OnReport(const std::string& worker_id, const v1::StageReport& report);
  void Disconnect(const std::string& worker_id);

  // Heartbeat timeouts, deadlines, stalls, the end of the reconnect grace,
  // then scheduling. Called by a ticker; also after every event.
  void Tick();

  size_t connected_workers() const;
  // Waits, at most `timeout`, until exactly `count` workers are connected;
  // whether they are.
  bool AwaitConnectedWorkers(size_t count, absl::Duration timeout) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // What a change decided under the lock, carried out after it is released.
  struct Effects {
    std::vector<std::pair<Sender, v1::CoordinatorMessage>> messages;
    std::vector<v1::Job> writes;
    std::vector<std::string> deletes;  // jobs removed by retention
  };

  // Runs `body` under the lock, then writes the jobs it queued in pending_ and
  // only then sends its messages, with the lock released.
  // A refused write is written again with the job's next change (Carry
  // counts and logs it), so most changes need not hear of it.
  template <typename Body>
  void Mutate(Body body) ABSL_LOCKS_EXCLUDED(mu_) {
    MutateStored(std::move(body)).IgnoreError();
  }
  // Mutate, returning what the store said of those writes (OK when there
  // were none): for an answer that promises the change is durable.
  template <typename Body>
  absl::Status MutateStored(Body body) ABSL_LOCKS_EXCLUDED(mu_) {
    Effects effects;
    {
      absl::MutexLock lock(&mu_);
      body();
      EnforceRetentionLocked();
      effects = TakePendingLocked();
    }
    return Carry(effects);
  }
  // The effects queued so far, each job to write as it is now.
  Effects TakePendingLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Carry(const Effects& effects) ABSL_LOCKS_EXCLUDED(mu_);
  // What `read` takes from the job of that name, under the lock; NotFound
  // when there is none.
  template <typename Reader, typename T = std::invoke_result_t<Reader, const JobState&>>
  absl::StatusOr<T> Read(const std::string& name, Reader read) const ABSL_LOCKS_EXCLUDED(mu_) {
    absl::MutexLock lock(&mu_);
    const JobState* state = jobs_.Find(name);
    if (state == nullptr) return JobNotFound(name);
    return read(*state);
  }
  // Writes the jobs and removes the named ones, through the group commit.
  absl::Status Store(std::vector<v1::Job> puts, std::vector<std::string> deletes)
      ABSL_LOCKS_EXCLUDED(mu_) {
    return store_.Apply(puts, deletes);
  }
  // A job enters the table (and the gauges' phase counts).
  JobState& InsertLocked(JobState state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job's phase went from `from` to its current one.
  void PhaseChangedLocked(JobState& state, v1::JobPhase from) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // A queued or restarting job whose workers all let go joins the queue.
  void EnqueueLocked(JobState& state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EnqueueLocked(const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Removes the finished jobs retention no longer keeps: from the table, the
  // queue and the metrics, and (by the effects) from the store.
  void EnforceRetentionLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // A worker that was running a stage before the coordinator restarted.
  void AdoptLocked(WorkerRegistry::Worker& worker) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Connect's check of what a registering worker says it runs.
  absl::Status CheckRunningClaimLocked(const v1::WorkerRegistration& registration,
                                       const std::string& name_space)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ScheduleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // worker_ids[replica * P + stage] runs that stage of that replica.
  void PlaceLocked(JobState& state, const std::vector<std::string>& worker_ids)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The reconnect grace, the deadline and stall detection of one job.
  void CheckTimersLocked(JobState& state, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // pipeline.elastic (job_manager_elastic.cc): a job waiting for lost workers,
  // or queued and never placed, past its grace runs at the largest shape the
  // idle matching workers allow;
  // a running one grows at a new checkpoint when more workers are idle, at
  // most once per min_resize_interval_seconds.
  void CheckElasticLocked(JobState& state, absl::Time now) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The job's spec becomes its submitted spec at `to`; the Resizing
  // condition says from, to, why and the step; it is queued at the new shape.
  void ResizeLocked(JobState& state, const ElasticShape& to, const std::string& reason,
                    const std::string& why) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Idle registered workers that match the job's selector (AsPending).
  int IdleMatchingWorkersLocked(const JobState& state) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
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
  void UpdateGaugesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  JobState* FindLocked(const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return jobs_.Find(name);
  }

  GroupCommitStore store_;
  CoordinatorMetrics& metrics_;
  const JobManagerOptions options_;
  Clock& clock_;

  mutable absl::Mutex mu_;
  JobTable jobs_ ABSL_GUARDED_BY(mu_);
  // The jobs waiting for workers.
  JobQueue queue_ ABSL_GUARDED_BY(mu_);
  // Names being written to the store by Submit, not yet in jobs_, and names
  // of removed jobs whose deletion is not yet durable: a submission of such a
  // name waits for it.
  std::set<std::string> submitting_ ABSL_GUARDED_BY(mu_);
  // Of those, how many per namespace (max_jobs_per_namespace counts them).
  std::map<std::string, size_t> submitting_per_namespace_ ABSL_GUARDED_BY(mu_);
  std::set<std::string> removing_ ABSL_GUARDED_BY(mu_);
  // Elastic jobs queued and never placed: Tick looks at these too (the
  // active jobs it looks at are running or restarting), so one that waits
  // past its grace starts at the shape the workers there allow.
  std::set<std::string> elastic_queued_ ABSL_GUARDED_BY(mu_);
  // Names this run's page tokens, so one from an earlier run is refused.
  const uint64_t instance_;
  WorkerRegistry workers_ ABSL_GUARDED_BY(mu_);
  WorkerLiveness liveness_;  // its own lock, taken inside mu_ or alone
  absl::Time recovered_at_ ABSL_GUARDED_BY(mu_);
  Effects pending_ ABSL_GUARDED_BY(mu_);
};

}  // namespace paci
