#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "paci/v1/coordinator.pb.h"
#include "server/job_list.h"
#include "server/job_status.h"

namespace paci {

// One running stage as the JobManager watches it (whether it finished is
// JobState::finished, kept in the job's status).
struct StageProgress {
  // After a coordinator restart: its stage had finished, or its worker has
  // connected again and said it runs this slot or just ran it
  // (JobState::awaiting_reconnect until every one has).
  bool reconnected = false;
  absl::Time last_progress;
  int64_t last_step = -1;
};

// One job as the coordinator holds it: the record the clients see (and the
// store keeps) and the attempt's bookkeeping, which is not persisted.
struct JobState {
  v1::Job job;
  int64_t sequence = 0;  // submission order in this run; JobTable::Insert sets it
  // Per slot (replica * P + stage) of the current attempt; its worker is
  // status().stages(slot).worker_id(), the one record of the placement.
  std::vector<StageProgress> stages;
  CheckpointShards shards;
  std::string link_secret;  // the current attempt's (StageAssignment.link_secret)
  absl::Time attempt_started;
  absl::Time queued_since;
  absl::Time last_persisted;
  bool awaiting_reconnect = false;
  absl::Time finished_at = absl::InfinitePast();  // when it ended, for retention
  absl::Time expires_at = absl::InfiniteFuture();
  v1::JobTrace trace;  // this placement's spans, at most trace_max_spans per stage
  // pipeline.elastic (job_manager_elastic.cc): when the resize under way was
  // decided (InfinitePast: none), when the last one was placed, and the
  // checkpoint step seen at the last look (a grow waits for a new one).
  absl::Time resize_started = absl::InfinitePast();
  absl::Time last_resize = absl::InfinitePast();
  int64_t seen_checkpoint = 0;

  v1::JobStatus& status() { return *job.mutable_status(); }
  const v1::JobStatus& status() const { return job.status(); }
  const v1::JobSpec& spec() const { return job.spec(); }
  // The worker placed on `slot` by the last attempt.
  const std::string& worker(int slot) const { return job.status().stages(slot).worker_id(); }
  // Whether the stage on `slot` ended successfully in the last attempt.
  bool finished(int slot) const { return job.status().stages(slot).finished(); }
  const std::string& name() const { return job.name(); }
};

// How long finished jobs (succeeded, failed, cancelled) are kept.
struct RetentionPolicy {
  // Past this many the oldest finished are removed (negative: no limit by count) ...
  int64_t finished_jobs_to_keep = 10000;
  // ... and each is removed this long after it finished (InfiniteDuration: no
  // limit by age), or after its spec's run_policy.ttl_seconds_after_finished
  // when that is shorter.
  absl::Duration finished_job_ttl = absl::Hours(24 * 7);
};

// The coordinator's jobs in memory and their indexes: by name, in submission
// order, each phase's in submission order (ListJobs's pages, the gauges, the
// running jobs the ticker looks at) and the finished by completion and by
// expiry (retention). Storage only: the lifecycle is the JobManager's.
//
// Not thread-safe: the JobManager calls it under its lock. Jobs never move in
// memory while they are held.
class JobTable {
 public:
  explicit JobTable(const RetentionPolicy& retention) : retention_(retention) {}

  // Adds a job under the next sequence number. A job that is already finished
  // is kept for retention from its completion_time (from `now` without one).
  JobState& Insert(JobState state, absl::Time now);
  JobState* Find(const std::string& name);
  const JobState* Find(const std::string& name) const;

  // The job's phase went from `from` to its current one at `now`.
  void PhaseChanged(JobState& state, v1::JobPhase from, absl::Time now);

  // A job retention removed.
  struct Removed {
    std::string name;
    v1::JobPhase phase;
    absl::Time finished_at;
    std::string reason;  // "count" or "age"
  };
  // Removes the finished jobs past the count limit, then those past their
  // age at `now`; the work is bounded by the number removed.
  std::vector<Removed> EnforceRetention(absl::Time now);

  // Running and restarting jobs, in submission order.
  std::vector<std::string> Active() const;
  // One page of the jobs the query selects, in submission order; page tokens
  // carry `instance` (job_list.h).
  absl::StatusOr<JobPage> List(const JobListQuery& query, uint64_t instance) const;

  size_t size() const { return jobs_.size(); }
  size_t finished() const { return finished_.size(); }
  size_t InPhase(v1::JobPhase phase) const;
  // The jobs held of namespace `name_space` (their kNamespaceLabel, common/
  // peer_identity.h), finished ones included until retention removes them;
  // jobs of none are not counted.
  size_t InNamespace(const std::string& name_space) const;

 private:
  void TrackFinished(JobState& state, absl::Time finished);
  Removed Remove(int64_t sequence, const std::string& reason);

  const RetentionPolicy retention_;
  int64_t next_sequence_ = 1;
  std::map<std::string, JobState> jobs_;
  std::map<int64_t, JobState*> by_sequence_;
  std::map<v1::JobPhase, std::set<int64_t>> by_phase_;
  // Jobs per namespace, of those that have one (never 0: erased instead).
  std::map<std::string, size_t> by_namespace_;
  // Finished jobs by (completion, sequence), and by (expiry, sequence).
  std::set<std::pair<absl::Time, int64_t>> finished_;
  std::set<std::pair<absl::Time, int64_t>> expiring_;
};

}  // namespace paci
