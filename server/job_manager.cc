#include "server/job_manager.h"

#include <algorithm>
#include <map>

#include <glog/logging.h>
#include <google/protobuf/util/message_differencer.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/job_phase.h"
#include "common/job_spec.h"
#include "common/peer_identity.h"
#include "common/random.h"
#include "common/status_macros.h"
#include "server/job_placement.h"

namespace paci {
namespace {

bool IsActive(v1::JobPhase phase) { return phase == v1::RUNNING || phase == v1::RESTARTING; }

}  // namespace

JobManager::JobManager(JobStore& store, CoordinatorMetrics& metrics,
                       const JobManagerOptions& options, Clock& clock)
    : store_(store),
      metrics_(metrics),
      options_(options),
      clock_(clock),
      jobs_(options.retention),
      instance_(RandomUint64()) {}

JobManager::Effects JobManager::TakePendingLocked() {
  Effects effects = std::exchange(pending_, {});
  std::vector<v1::Job> writes;
  for (v1::Job& job : effects.writes) {
    // A job removed since is not written again: its deletion follows.
    if (const JobState* state = FindLocked(job.name())) writes.push_back(state->job);
  }
  effects.writes = std::move(writes);
  return effects;
}

absl::Status JobManager::Carry(const Effects& effects) {
  const bool writes = !effects.writes.empty() || !effects.deletes.empty();
  const absl::Status stored = writes ? Store(effects.writes, effects.deletes) : absl::OkStatus();
  if (!stored.ok()) {
    // Nothing already stored is lost: the next change of these jobs writes
    // them again. Counted, so an alert can say the disk is refusing writes.
    metrics_.AddStoreError();
    LOG(ERROR) << "cannot store " << effects.writes.size() << " jobs and remove "
               << effects.deletes.size() << ": " << stored;
  }
  // Sent once stored: a worker assigned its next stage stops repeating the
  // final report of its last one (WorkerAgent), whose effect is on disk now.
  // A refused write does not hold them back: a full disk must not stop jobs.
  for (const auto& [sender, message] : effects.messages) sender(message);
  if (!effects.deletes.empty()) {
    absl::MutexLock lock(&mu_);
    for (const std::string& name : effects.deletes) removing_.erase(name);
  }
  return stored;
}

JobState& JobManager::InsertLocked(JobState state) {
  JobState& inserted = jobs_.Insert(std::move(state), clock_.Now());
  return inserted;
}

void JobManager::PhaseChangedLocked(JobState& state, v1::JobPhase from) {
  const v1::JobPhase to = state.status().phase();
  jobs_.PhaseChanged(state, from, clock_.Now());
  if (IsTerminal(to) && !IsTerminal(from)) queue_.Remove(state.name());
}

void JobManager::EnqueueLocked(JobState& state) {
  const v1::JobPhase phase = state.status().phase();
  if ((phase != v1::QUEUED && phase != v1::RESTARTING) || state.awaiting_reconnect) return;
  // A restarting job waits until every worker of its last attempt let go.
  if (queue_.Contains(state.name()) || workers_.Holds(state.name())) return;
  queue_.Add(AsPending(state.job, state.sequence));
  if (phase == v1::QUEUED && IsElastic(state.spec())) elastic_queued_.insert(state.name());
}

void JobManager::EnqueueLocked(const std::string& name) {
  if (JobState* state = FindLocked(name)) EnqueueLocked(*state);
}

void JobManager::EnforceRetentionLocked() {
  const std::vector<JobTable::Removed> removed = jobs_.EnforceRetention(clock_.Now());
  for (const JobTable::Removed& job : removed) {
    LOG(INFO) << "job " << job.name << " removed from the store by retention (" << job.reason
              << "): it ended " << PhaseName(job.phase) << " at "
              << absl::FormatTime(job.finished_at) << "; its checkpoints are kept";
    queue_.Remove(job.name);
    removing_.insert(job.name);
    pending_.deletes.push_back(job.name);
    metrics_.RemoveJob(job.name, job.reason);
  }
  if (!removed.empty()) UpdateGaugesLocked();
}

absl::Status JobManager::Recover() {
  absl::StatusOr<std::vector<v1::Job>> jobs = store_.List();
  if (!jobs.ok()) return jobs.status();
  std::vector<std::string> deletes;
  {
    absl::MutexLock lock(&mu_);
    const absl::Time now = clock_.Now();
    recovered_at_ = now;
    for (v1::Job& job : *jobs) {
      JobState& inserted = InsertLocked(RecoveredJob(std::move(job), now));
      if (IsActive(inserted.status().phase())) metrics_.TrackJob(inserted.name());
      EnqueueLocked(inserted);
    }
    // Retention first, so finished jobs past the limits cost nothing more.
    EnforceRetentionLocked();
    deletes = std::exchange(pending_.deletes, {});
    LOG(INFO) << "recovered " << jobs_.size() << " jobs from the store ("
              << jobs_.finished() << " finished), removed " << deletes.size()
              << " by retention";
    UpdateGaugesLocked();
  }
  if (deletes.empty()) return absl::OkStatus();
  absl::Status removed = Store({}, deletes);
  absl::MutexLock lock(&mu_);
  for (const std::string& name : deletes) removing_.erase(name);
  return removed;
}

absl::StatusOr<v1::Job> JobManager::Submit(const v1::JobSpec& spec,
                                           const std::map<std::string, std::string>& labels) {
  const std::string& name = spec.name();
  const std::string name_space = NamespaceOfLabels(labels);
  v1::Job record;
  {
    absl::MutexLock lock(&mu_);
    // A submission of the same name in flight, or the removal of a finished
    // job of that name: its outcome decides this one.
    auto settled = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return !submitting_.count(name) && !removing_.count(name);
    };
    mu_.Await(absl::Condition(&settled));
    if (const JobState* existing = FindLocked(name)) {
      if (SameSubmission(existing->job, spec, labels)) {
        return existing->job;
      }
      return absl::AlreadyExistsError(absl::StrCat(
          "job \"", name, "\" exists with a different spec or labels; choose another name"));
    }
    const int64_t unfinished =
        static_cast<int64_t>(jobs_.size() - jobs_.finished() + submitting_.size());
    if (unfinished >= options_.max_jobs) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "the coordinator holds ", unfinished, " unfinished jobs, its limit (--max_jobs)"));
    }
    // One namespace (one tenant, or the TrainingJobs of one) holds no more
    // than its share, finished jobs included: every job held costs memory and
    // a load on each restart until retention removes it.
    if (!name_space.empty()) {
      const auto in_flight = submitting_per_namespace_.find(name_space);
      const int64_t held = static_cast<int64_t>(
          jobs_.InNamespace(name_space) +
          (in_flight == submitting_per_namespace_.end() ? 0 : in_flight->second));
      if (held >= options_.max_jobs_per_namespace) {
        return absl::ResourceExhaustedError(absl::StrCat(
            "namespace ", name_space, " holds ", held, " jobs, its limit "
            "(--max_jobs_per_namespace); finished jobs count until retention removes them "
            "(run_policy.ttl_seconds_after_finished, --finished_job_ttl_seconds, "
            "--finished_jobs_to_keep)"));
      }
      ++submitting_per_namespace_[name_space];
    }
    submitting_.insert(name);
    record = NewJob(spec, labels, clock_.Now());
  }
  // The job exists once it is durable; the store is written without the lock.
  const absl::Status stored = Store({record}, {});
  absl::StatusOr<v1::Job> result;
  Mutate([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    submitting_.erase(name);
    if (!name_space.empty()) {
      auto in_flight = submitting_per_namespace_.find(name_space);
      if (in_flight != submitting_per_namespace_.end() && --in_flight->second == 0) {
        submitting_per_namespace_.erase(in_flight);
      }
    }
    if (!stored.ok()) {
      result = absl::UnavailableError(
          absl::StrCat("cannot store job \"", name, "\": ", stored.message()));
      return;
    }
    JobState state;
    state.job = std::move(record);
    state.queued_since = clock_.Now();
    state.last_persisted = state.queued_since;
    JobState& inserted = InsertLocked(std::move(state));
    metrics_.AddSubmission();
    EnqueueLocked(inserted);
    ScheduleLocked();
    UpdateGaugesLocked();
    result = inserted.job;
  });
  return result;
}

absl::StatusOr<v1::Job> JobManager::Get(const std::string& name) const {
  return Read(name, [](const JobState& state) { return state.job; });
}

absl::StatusOr<JobPage> JobManager::List(const JobListQuery& query) const {
  absl::MutexLock lock(&mu_);
  return jobs_.List(query, instance_);
}

std::vector<v1::Job> JobManager::List(v1::JobPhase phase) const {
  std::vector<v1::Job> jobs;
  JobListQuery query;
  query.phase = phase;
  query.page_size = JobListQuery::kMaxPageSize;
  do {
    absl::StatusOr<JobPage> page = List(query);
    if (!page.ok()) break;
    for (v1::Job& job : page->jobs) jobs.push_back(std::move(job));
    query.page_token = page->next_page_token;
  } while (!query.page_token.empty());
  return jobs;
}

absl::StatusOr<v1::Job> JobManager::Cancel(const std::string& name) {
  absl::StatusOr<v1::Job> result;
  const absl::Status stored = MutateStored([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    JobState* state = FindLocked(name);
    if (state == nullptr) {
      result = JobNotFound(name);
      return;
    }
    if (!IsTerminal(state->status().phase())) {
      FinishLocked(*state, v1::CANCELLED, "Cancelled", "cancelled by a client");
      ScheduleLocked();
    } else {
      ChangedLocked(*state, /*persist_now=*/true);  // stored again: an earlier write may have failed
    }
    result = state->job;
  });
  if (result.ok() && !stored.ok()) {
    return absl::UnavailableError(absl::StrCat(
        "job ", name, " is cancelled, but the store refused to record it (", stored.message(),
        "): it would run again after a coordinator restart; cancel it again"));
  }
  return result;
}

absl::StatusOr<v1::Job> JobManager::UpdateRunPolicy(const std::string& name,
                                                    const v1::RunPolicy& policy) {
  absl::StatusOr<v1::Job> result;
  Mutate([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    JobState* state = FindLocked(name);
    if (state == nullptr) {
      result = JobNotFound(name);
      return;
    }
    if (IsTerminal(state->status().phase())) {
      result = absl::FailedPreconditionError(
          absl::StrCat("job ", name, " has finished (", PhaseName(state->status().phase()),
                       "): its run policy no longer applies"));
      return;
    }
    const v1::RunPolicy& now = state->spec().run_policy();
    const std::map<std::string, std::string> selector(now.worker_selector().begin(),
                                                      now.worker_selector().end());
    if (selector != std::map<std::string, std::string>(policy.worker_selector().begin(),
                                                       policy.worker_selector().end())) {
      result = absl::FailedPreconditionError(absl::StrCat(
          "run_policy.worker_selector of job ", name, " cannot change after it was submitted"));
      return;
    }
    if (!google::protobuf::util::MessageDifferencer::Equals(now, policy)) {
      *state->job.mutable_spec()->mutable_run_policy() = policy;
      if (state->job.has_submitted_spec()) {  // an elastic job's other shapes too
        *state->job.mutable_submitted_spec()->mutable_run_policy() = policy;
      }
      ChangedLocked(*state, /*persist_now=*/true);
      ScheduleLocked();  // a higher priority may place it now
    }
    result = state->job;
  });
  return result;
}

absl::StatusOr<v1::JobTrace> JobManager::Trace(const std::string& name) const {
  return Read(name, [](const JobState& state) { return state.trace; });
}

absl::StatusOr<v1::Job> JobManager::WaitForChange(const std::string& name, int64_t after_version,
                                                  absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto changed = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    const JobState* state = jobs_.Find(name);
    return state == nullptr || state->job.version() > after_version;
  };
  clock_.AwaitWithDeadline(mu_, absl::Condition(&changed), clock_.Now() + timeout);
  const JobState* state = jobs_.Find(name);
  if (state == nullptr) return JobNotFound(name);
  return state->job;
}

void JobManager::Tick() {
  Mutate([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const absl::Time now = clock_.Now();
    for (const std::string& id : liveness_.Silent(now, options_.heartbeat_timeout)) {
      RemoveWorkerLocked(id, absl::StrCat("no heartbeat for ",
                                          absl::FormatDuration(options_.heartbeat_timeout)));
    }
    // Only running and restarting jobs have timers; the others cost nothing here.
    for (const std::string& name : jobs_.Active()) {
      if (JobState* state = FindLocked(name)) CheckTimersLocked(*state, now);
    }
    for (auto it = elastic_queued_.begin(); it != elastic_queued_.end();) {
      JobState* state = FindLocked(*it);
      if (state == nullptr || state->status().phase() != v1::QUEUED) {
        it = elastic_queued_.erase(it);
        continue;
      }
      CheckElasticLocked(*state, now);
      ++it;
    }
    ScheduleLocked();
    UpdateGaugesLocked();
  });
}

void JobManager::CheckTimersLocked(JobState& state, absl::Time now) {
  const v1::JobStatus& status = state.status();
  if (state.awaiting_reconnect && now - recovered_at_ > options_.reconnect_grace) {
    state.awaiting_reconnect = false;
    const int missing = std::count_if(state.stages.begin(), state.stages.end(),
                                      [](const StageProgress& s) { return !s.reconnected; });
    FailAttemptLocked(state, "WorkersLost",
                      absl::StrCat("after a coordinator restart ", missing, " of ",
                                   state.stages.size(), " stage workers did not come back"),
                      /*permanent=*/false);
  }
  const int64_t deadline = state.spec().run_policy().active_deadline_seconds();
  if (deadline > 0 && status.has_start_time() && !IsTerminal(status.phase()) &&
      now - FromProto(status.start_time()) > absl::Seconds(deadline)) {
    FinishLocked(state, v1::FAILED, "DeadlineExceeded",
                 absl::StrCat("the job ran longer than activeDeadlineSeconds (", deadline, " s)"));
    return;
  }
  CheckElasticLocked(state, now);
  if (status.phase() != v1::RUNNING || state.awaiting_reconnect) return;
  const std::vector<std::string> stalled = StalledStages(state, now, options_.stall_timeout);
  if (!stalled.empty()) {
    SetConditionLocked(state, "Stalled", true, "StageStalled",
                       absl::StrCat(absl::StrJoin(stalled, ", "), " made no progress for ",
                                    absl::FormatDuration(options_.stall_timeout)));
  } else {
    SetConditionLocked(state, "Stalled", false, "Progressing", "every stage is progressing");
  }
}

size_t JobManager::connected_workers() const {
  absl::MutexLock lock(&mu_);
  return workers_.size();
}

bool JobManager::AwaitConnectedWorkers(size_t count, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto connected = [this, count]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return workers_.size() == count;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&connected), timeout);
}

void JobManager::ScheduleLocked() {
  // Only the ready jobs the pass reaches are looked at: the placed, the newly
  // unschedulable and the first that waits (JobQueue).
  SchedulingDecision decision = queue_.Schedule(workers_.Slots());
  for (const Placement& placement : decision.placements) {
    PlaceLocked(*FindLocked(placement.job_name), placement.worker_ids);
  }
  for (const std::string& name : decision.unschedulable) {
    JobState& state = *FindLocked(name);
    // A job runs on the workers of its own namespace only (AsPending).
    const std::string name_space = NamespaceOfLabels(state.job.labels());
    SetConditionLocked(
        state, "Unschedulable", true, "NoMatchingWorkers",
        absl::StrCat("fewer than ", WorkersOf(state.spec().pipeline()),
                     " connected workers match the job's worker selector",
                     name_space.empty()
                         ? std::string(" (a namespace's workers run only that namespace's jobs)")
                         : absl::StrCat(" among the workers of its namespace, ", name_space)));
  }
}

void JobManager::PlaceLocked(JobState& state, const std::vector<std::string>& worker_ids) {
  queue_.Remove(state.name());
  const absl::Time now = clock_.Now();
  StartAttempt(state, workers_, worker_ids, now);
  v1::JobStatus& status = state.status();
  for (int w = 0; w < static_cast<int>(worker_ids.size()); ++w) {
    v1::CoordinatorMessage message;
    *message.mutable_assign() = AssignmentFor(state, workers_, instance_, w);
    workers_.Assign(worker_ids[w], state.name(), status.attempt(), w);
    pending_.messages.emplace_back(workers_.at(worker_ids[w]).sender, std::move(message));
  }
  // Its series from its first placement: jobs that only wait add none.
  if (status.attempt() == 1) metrics_.TrackJob(state.name());
  metrics_.ObserveSchedulingLatency(absl::ToDoubleSeconds(now - state.queued_since));
  if (!status.has_start_time()) *status.mutable_start_time() = ToProto(now);
  SetConditionLocked(state, "Unschedulable", false, "Placed", "");
  const ElasticShape shape = ShapeOf(state.spec());
  metrics_.SetJobShape(state.name(), shape.stages, shape.replicas);
  state.seen_checkpoint = status.checkpoint_step();
  const auto resizing = std::find_if(
      status.conditions().begin(), status.conditions().end(),
      [](const v1::JobCondition& c) { return c.type() == "Resizing" && c.status(); });
  if (resizing != status.conditions().end()) {  // done (decided before a restart, too)
    std::string took;
    if (state.resize_started != absl::InfinitePast()) {
      const double seconds = absl::ToDoubleSeconds(now - state.resize_started);
      status.set_resize_seconds(status.resize_seconds() + seconds);
      metrics_.AddResizeSeconds(state.name(), seconds);
      took = absl::StrFormat(", %.1f s after the decision", seconds);
    }
    // What was decided (from, to, why, the step), and that it runs so now.
    const std::string decided = resizing->message();
    SetConditionLocked(state, "Resizing", false, "Resized",
                       absl::StrCat(decided, "; running at ", ShapeName(shape), took));
    state.last_resize = now;
  }
  state.resize_started = absl::InfinitePast();
  const std::string placed = absl::StrJoin(worker_ids, ", ");
  SetPhaseLocked(state, v1::RUNNING, "Placed",
                 absl::StrCat("attempt ", status.attempt(), " on workers ", placed));
  LOG(INFO) << "job " << state.name() << " attempt " << status.attempt() << " placed on "
            << placed;
  ChangedLocked(state, true);
}

void JobManager::StopWorkersLocked(JobState& state, const std::string& reason) {
  for (auto& message : workers_.StopJob(state.name(), reason)) {
    pending_.messages.push_back(std::move(message));
  }
}

void JobManager::FailAttemptLocked(JobState& state, const std::string& reason,
                                   const std::string& message, bool permanent) {
  v1::JobStatus& status = state.status();
  if (status.phase() != v1::RUNNING) return;
  LOG(WARNING) << "job " << state.name() << " attempt " << status.attempt() << ": " << message;
  const int backoff_limit = state.spec().run_policy().backoff_limit();
  if (permanent) {
    FinishLocked(state, v1::FAILED, reason, message);
    return;
  }
  if (status.restarts() >= backoff_limit) {
    FinishLocked(state, v1::FAILED, "BackoffLimitExceeded",
                 absl::StrCat(message, "; restarted ", status.restarts(),
                              " times, backoffLimit is ", backoff_limit));
    return;
  }
  StopWorkersLocked(state, message);
  status.set_restarts(status.restarts() + 1);
  metrics_.AddRestart(state.name());
  state.queued_since = clock_.Now();
  SetPhaseLocked(state, v1::RESTARTING, reason,
                 absl::StrCat(message, "; restarting from step ", status.checkpoint_step()));
  ChangedLocked(state, true);
  EnqueueLocked(state);
}

void JobManager::FinishLocked(JobState& state, v1::JobPhase phase, const std::string& reason,
                              const std::string& message) {
  if (phase != v1::SUCCEEDED) StopWorkersLocked(state, message);
  state.awaiting_reconnect = false;
  *state.status().mutable_completion_time() = ToProto(clock_.Now());
  SetPhaseLocked(state, phase, reason, message);
  SetConditionLocked(state, "Stalled", false, "Finished", "");
  SetConditionLocked(state, "Resizing", false, "Finished", "");
  LOG(INFO) << "job " << state.name() << " " << v1::JobPhase_Name(phase) << ": " << message;
  ChangedLocked(state, true);
}

void JobManager::SetPhaseLocked(JobState& state, v1::JobPhase phase, const std::string& reason,
                                const std::string& message) {
  const v1::JobPhase from = state.status().phase();
  if (SetPhase(state.status(), phase, reason, message, clock_.Now())) ChangedLocked(state, false);
  PhaseChangedLocked(state, from);
}

void JobManager::SetConditionLocked(JobState& state, const std::string& type, bool value,
                                    const std::string& reason, const std::string& message) {
  if (SetCondition(state.status(), type, value, reason, message, clock_.Now())) {
    ChangedLocked(state, false);
  }
}

void JobManager::ApplyReportLocked(JobState& state, const v1::StageReport& report) {
  const int s = SlotOf(state.spec(), report.stage(), report.replica());
  if (s < 0 || s >= static_cast<int>(state.stages.size()) || s >= state.status().stages_size()) {
    return;
  }
  const absl::Time now = clock_.Now();
  StageProgress& progress = state.stages[s];
  if (report.optimizer_steps() != progress.last_step) {
    progress.last_step = report.optimizer_steps();
    progress.last_progress = now;
  }
  ApplyStageReport(report, now - state.attempt_started, state.status(), state.shards);
  if (s < state.trace.stages_size()) {
    AppendStageSpans(report, state.spec().runtime().trace_max_spans(),
                     *state.trace.mutable_stages(s));
  }
  const v1::JobStatus& status = state.status();
  metrics_.SetJobProgress(state.name(), status.step(), status.train_loss(),
                          status.validation_loss());
  ChangedLocked(state, /*persist_now=*/!report.checkpoint_steps().empty());
}

void JobManager::ChangedLocked(JobState& state, bool persist_now) {
  state.job.set_version(state.job.version() + 1);
  const absl::Time now = clock_.Now();
  if (!persist_now && now - state.last_persisted < options_.progress_persist_interval) return;
  state.last_persisted = now;
  // Written as it is at the end of the change (TakePendingLocked), once.
  const bool queued =
      std::any_of(pending_.writes.begin(), pending_.writes.end(),
                  [&](const v1::Job& job) { return job.name() == state.name(); });
  if (!queued) pending_.writes.push_back(state.job);
}

void JobManager::UpdateGaugesLocked() {
  for (v1::JobPhase p : kJobPhases) metrics_.SetJobsInPhase(PhaseName(p), jobs_.InPhase(p));
  const WorkerRegistry::Counts counts = workers_.Count();
  metrics_.SetWorkers("idle", counts.idle);
  metrics_.SetWorkers("busy", counts.busy);
  metrics_.SetWorkers("stopping", counts.stopping);
}

}  // namespace paci
