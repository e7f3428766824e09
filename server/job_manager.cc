#include "server/job_manager.h"

#include <algorithm>

#include <glog/logging.h>
#include <google/protobuf/util/message_differencer.h>
#include <google/protobuf/util/time_util.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/job_phase.h"
#include "server/job_scheduler.h"

namespace paci {
namespace {

using google::protobuf::util::TimeUtil;

google::protobuf::Timestamp ToProto(absl::Time t) {
  return TimeUtil::MicrosecondsToTimestamp(absl::ToUnixMicros(t));
}

absl::Time FromProto(const google::protobuf::Timestamp& t) {
  return absl::FromUnixMicros(TimeUtil::TimestampToMicroseconds(t));
}

PendingJob AsPending(const v1::Job& job, int64_t sequence) {
  PendingJob pending;
  pending.name = job.name();
  pending.priority = job.spec().run_policy().priority();
  pending.sequence = sequence;
  pending.num_stages = job.spec().pipeline().num_stages();
  for (const auto& [k, v] : job.spec().run_policy().worker_selector()) pending.selector[k] = v;
  return pending;
}

}  // namespace

JobManager::JobManager(JobStore& store, CoordinatorMetrics& metrics,
                       const JobManagerOptions& options, Clock clock)
    : store_(store), metrics_(metrics), options_(options), clock_(std::move(clock)) {}

JobManager::Effects JobManager::TakePendingLocked() {
  Effects effects = std::exchange(pending_, {});
  for (v1::Job& job : effects.writes) {
    if (const JobState* state = FindLocked(job.name())) job = state->job;
  }
  return effects;
}

void JobManager::Carry(const Effects& effects) {
  for (const auto& [sender, message] : effects.messages) sender(message);
  for (const v1::Job& job : effects.writes) {
    absl::Status stored = Persist(job);
    if (!stored.ok()) LOG(ERROR) << "cannot store job " << job.name() << ": " << stored;
  }
}

absl::Status JobManager::Persist(const v1::Job& job) {
  absl::MutexLock lock(&store_mu_);
  auto it = persisted_version_.find(job.name());
  if (it != persisted_version_.end() && it->second >= job.version()) return absl::OkStatus();
  absl::Status stored = store_.Put(job);
  if (stored.ok()) persisted_version_[job.name()] = job.version();
  return stored;
}

JobManager::JobState* JobManager::FindLocked(const std::string& name) {
  auto it = jobs_.find(name);
  return it == jobs_.end() ? nullptr : &it->second;
}

const JobManager::JobState* JobManager::FindLocked(const std::string& name) const {
  auto it = jobs_.find(name);
  return it == jobs_.end() ? nullptr : &it->second;
}

absl::Status JobManager::Recover() {
  absl::StatusOr<std::vector<v1::Job>> jobs = store_.List();
  if (!jobs.ok()) return jobs.status();
  {
    absl::MutexLock lock(&store_mu_);
    for (const v1::Job& job : *jobs) persisted_version_[job.name()] = job.version();
  }
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_();
  recovered_at_ = now;
  for (v1::Job& job : *jobs) {
    JobState state;
    state.sequence = next_sequence_++;
    state.queued_since = now;
    state.job = std::move(job);
    const int P = state.spec().pipeline().num_stages();
    if (state.status().phase() == v1::RUNNING) {
      state.awaiting_reconnect = true;
      state.workers.assign(P, "");
      state.stages.assign(P, StageProgress{});
      for (auto& stage : state.stages) stage.last_progress = now;
      state.attempt_started = now;
    }
    const int64_t checkpoint = state.status().checkpoint_step();
    if (checkpoint > 0) {
      for (int s = 0; s < P; ++s) state.shards[checkpoint].insert(s);
    }
    const std::string name = state.name();
    if (!IsTerminal(state.status().phase())) metrics_.TrackJob(name);
    jobs_.emplace(name, std::move(state));
  }
  LOG(INFO) << "recovered " << jobs_.size() << " jobs from the store";
  UpdateGaugesLocked();
  return absl::OkStatus();
}

absl::StatusOr<v1::Job> JobManager::Submit(const v1::JobSpec& spec) {
  const std::string& name = spec.name();
  v1::Job record;
  {
    absl::MutexLock lock(&mu_);
    // A submission of the same name in flight: its outcome decides this one.
    auto settled = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !submitting_.count(name); };
    mu_.Await(absl::Condition(&settled));
    if (const JobState* existing = FindLocked(name)) {
      if (google::protobuf::util::MessageDifferencer::Equals(existing->spec(), spec)) {
        return existing->job;
      }
      return absl::AlreadyExistsError(
          absl::StrCat("job \"", name, "\" exists with a different spec; choose another name"));
    }
    const size_t held = jobs_.size() + submitting_.size();
    if (static_cast<int>(held) >= options_.max_jobs) {
      return absl::ResourceExhaustedError(
          absl::StrCat("the coordinator holds ", held, " jobs, its limit"));
    }
    submitting_.insert(name);
    record.set_name(name);
    *record.mutable_spec() = spec;
    *record.mutable_status()->mutable_create_time() = ToProto(clock_());
    record.mutable_status()->set_total_steps(spec.training().steps());
  }
  // The job exists once it is durable; the store is written without the lock.
  const absl::Status stored = Persist(record);
  absl::StatusOr<v1::Job> result;
  Mutate([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    submitting_.erase(name);
    if (!stored.ok()) {
      result = absl::UnavailableError(
          absl::StrCat("cannot store job \"", name, "\": ", stored.message()));
      return;
    }
    JobState& state = jobs_[name];
    state.job = std::move(record);
    state.sequence = next_sequence_++;
    state.queued_since = clock_();
    metrics_.AddSubmission();
    metrics_.TrackJob(name);
    SetPhaseLocked(state, v1::QUEUED, "Submitted", "waiting for workers");
    ChangedLocked(state, /*persist_now=*/true);
    ScheduleLocked();
    UpdateGaugesLocked();
    result = state.job;
  });
  return result;
}

absl::StatusOr<v1::Job> JobManager::Get(const std::string& name) const {
  return Read(name, [](const JobState& state) { return state.job; });
}

std::vector<v1::Job> JobManager::List(v1::JobPhase phase) const {
  absl::MutexLock lock(&mu_);
  std::vector<const JobState*> states;
  for (const auto& [name, state] : jobs_) {
    if (phase == v1::JOB_PHASE_UNSPECIFIED || state.job.status().phase() == phase) {
      states.push_back(&state);
    }
  }
  std::sort(states.begin(), states.end(),
            [](const JobState* a, const JobState* b) { return a->sequence < b->sequence; });
  std::vector<v1::Job> jobs;
  for (const JobState* state : states) jobs.push_back(state->job);
  return jobs;
}

absl::StatusOr<v1::Job> JobManager::Cancel(const std::string& name) {
  absl::StatusOr<v1::Job> result;
  Mutate([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    JobState* state = FindLocked(name);
    if (state == nullptr) {
      result = JobNotFound(name);
      return;
    }
    if (!IsTerminal(state->status().phase())) {
      FinishLocked(*state, v1::CANCELLED, "Cancelled", "cancelled by a client");
      ScheduleLocked();
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
    const JobState* state = FindLocked(name);
    return state == nullptr || state->job.version() > after_version;
  };
  mu_.AwaitWithTimeout(absl::Condition(&changed), timeout);
  const JobState* state = FindLocked(name);
  if (state == nullptr) return JobNotFound(name);
  return state->job;
}

absl::Status JobManager::Connect(const v1::WorkerRegistration& registration, Sender sender) {
  absl::Status result;
  Mutate([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    absl::StatusOr<WorkerRegistry::Worker*> worker =
        workers_.Add(registration, std::move(sender), clock_());
    if (!worker.ok()) {
      result = worker.status();
      return;
    }
    LOG(INFO) << "worker " << registration.worker_id() << " connected: link "
              << registration.link_address();
    if (!registration.running().job_name().empty()) AdoptLocked(**worker);
    ScheduleLocked();
    UpdateGaugesLocked();
  });
  return result;
}

void JobManager::AdoptLocked(WorkerRegistry::Worker& worker) {
  const v1::StageAssignment& running = worker.registration.running();
  const std::string& id = worker.registration.worker_id();
  worker.job = running.job_name();
  worker.attempt = running.attempt();
  worker.stage = running.stage();
  JobState* state = FindLocked(running.job_name());
  const bool ours = state != nullptr && state->awaiting_reconnect &&
                    state->status().attempt() == running.attempt() && running.stage() >= 0 &&
                    running.stage() < static_cast<int>(state->workers.size());
  if (!ours) {
    worker.stopping = true;
    pending_.messages.emplace_back(
        worker.sender, WorkerRegistry::StopMessage(running.job_name(), running.attempt(),
                                                   "the coordinator no longer runs this placement"));
    return;
  }
  state->workers[running.stage()] = id;
  if (std::count(state->workers.begin(), state->workers.end(), "") > 0) return;
  state->awaiting_reconnect = false;
  LOG(INFO) << "job " << state->name() << " reconciled with its workers";
  SetConditionLocked(*state, "Running", true, "Reconciled",
                     "every stage's worker came back after a coordinator restart");
  ChangedLocked(*state, true);
}

void JobManager::OnHeartbeat(const std::string& worker_id) {
  absl::MutexLock lock(&mu_);
  workers_.Touch(worker_id, clock_());
}

void JobManager::OnReport(const std::string& worker_id, const v1::StageReport& report) {
  Mutate([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    WorkerRegistry::Worker* worker = workers_.Find(worker_id);
    if (worker == nullptr) return;
    worker->last_seen = clock_();
    const bool final = report.finished() || !report.error().empty();
    const bool from_its_stage =
        worker->job == report.job_name() && worker->attempt == report.attempt();
    JobState* state = FindLocked(report.job_name());
    if (state != nullptr && from_its_stage && !worker->stopping &&
        state->status().phase() == v1::RUNNING && state->status().attempt() == report.attempt() &&
        report.stage() == worker->stage) {
      ApplyReportLocked(*state, report);
      if (!report.error().empty()) {
        FailAttemptLocked(*state, "StageFailed",
                          absl::StrCat("stage ", report.stage(), " on worker ", worker_id, ": ",
                                       report.error()),
                          IsPermanentError(report.error_code()));
      } else if (report.finished()) {
        state->stages[report.stage()].finished = true;
        if (std::all_of(state->stages.begin(), state->stages.end(),
                        [](const StageProgress& s) { return s.finished; })) {
          FinishLocked(*state, v1::SUCCEEDED, "Completed",
                       absl::StrCat("trained ", state->status().step(), " steps"));
        }
      }
    }
    if (final && from_its_stage) WorkerRegistry::Release(*worker);
    ScheduleLocked();
    UpdateGaugesLocked();
  });
}

void JobManager::Disconnect(const std::string& worker_id) {
  Mutate([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    RemoveWorkerLocked(worker_id, "its stream closed");
    ScheduleLocked();
    UpdateGaugesLocked();
  });
}

void JobManager::RemoveWorkerLocked(const std::string& worker_id, const std::string& why) {
  std::optional<WorkerRegistry::Worker> worker = workers_.Remove(worker_id);
  if (!worker) return;
  LOG(WARNING) << "worker " << worker_id << " is gone: " << why;
  if (worker->job.empty() || worker->stopping) return;
  JobState* state = FindLocked(worker->job);
  if (state == nullptr || state->status().attempt() != worker->attempt) return;
  if (state->awaiting_reconnect && worker->stage >= 0 &&
      worker->stage < static_cast<int>(state->workers.size())) {
    state->workers[worker->stage] = "";
  }
  FailAttemptLocked(*state, "WorkerLost",
                    absl::StrCat("worker ", worker_id, " running stage ", worker->stage,
                                 " is gone (", why, ")"),
                    /*permanent=*/false);
}

void JobManager::Tick() {
  Mutate([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const absl::Time now = clock_();
    for (const std::string& id : workers_.Silent(now, options_.heartbeat_timeout)) {
      RemoveWorkerLocked(id, absl::StrCat("no heartbeat for ",
                                          absl::FormatDuration(options_.heartbeat_timeout)));
    }
    for (auto& [name, state] : jobs_) CheckTimersLocked(state, now);
    ScheduleLocked();
    UpdateGaugesLocked();
  });
}

void JobManager::CheckTimersLocked(JobState& state, absl::Time now) {
  const v1::JobStatus& status = state.status();
  if (state.awaiting_reconnect && now - recovered_at_ > options_.reconnect_grace) {
    state.awaiting_reconnect = false;
    const int missing = std::count(state.workers.begin(), state.workers.end(), "");
    FailAttemptLocked(state, "WorkersLost",
                      absl::StrCat("after a coordinator restart ", missing, " of ",
                                   state.workers.size(), " stage workers did not come back"),
                      /*permanent=*/false);
  }
  const int64_t deadline = state.spec().run_policy().active_deadline_seconds();
  if (deadline > 0 && status.has_start_time() && !IsTerminal(status.phase()) &&
      now - FromProto(status.start_time()) > absl::Seconds(deadline)) {
    FinishLocked(state, v1::FAILED, "DeadlineExceeded",
                 absl::StrCat("the job ran longer than activeDeadlineSeconds (", deadline, " s)"));
    return;
  }
  if (status.phase() != v1::RUNNING || state.awaiting_reconnect) return;
  std::vector<std::string> stalled;
  for (size_t s = 0; s < state.stages.size(); ++s) {
    if (!state.stages[s].finished && now - state.stages[s].last_progress > options_.stall_timeout) {
      stalled.push_back(absl::StrCat("stage ", s, " on worker ", state.workers[s]));
    }
  }
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

void JobManager::ScheduleLocked() {
  std::vector<PendingJob> queue;
  for (const auto& [name, state] : jobs_) {
    const v1::JobPhase phase = state.job.status().phase();
    if ((phase != v1::QUEUED && phase != v1::RESTARTING) || state.awaiting_reconnect) continue;
    // A restarting job waits until every worker of its last attempt let go.
    if (workers_.Holds(name)) continue;
    queue.push_back(AsPending(state.job, state.sequence));
  }
  if (queue.empty()) return;
  SchedulingDecision decision = ScheduleJobs(std::move(queue), workers_.Slots());
  for (const Placement& placement : decision.placements) {
    PlaceLocked(jobs_.at(placement.job_name), placement.worker_ids);
  }
  for (const std::string& name : decision.unschedulable) {
    JobState& state = jobs_.at(name);
    SetConditionLocked(state, "Unschedulable", true, "NoMatchingWorkers",
                       absl::StrCat("fewer than ", state.spec().pipeline().num_stages(),
                                    " connected workers match the job's worker selector"));
  }
}

void JobManager::PlaceLocked(JobState& state, const std::vector<std::string>& worker_ids) {
  const absl::Time now = clock_();
  v1::JobStatus& status = state.status();
  status.set_attempt(status.attempt() + 1);
  const int P = static_cast<int>(worker_ids.size());
  state.workers = worker_ids;
  state.stages.assign(P, StageProgress{});
  for (auto& stage : state.stages) stage.last_progress = now;
  state.attempt_started = now;
  status.clear_stages();
  state.trace.Clear();
  state.trace.set_name(state.name());
  for (int s = 0; s < P; ++s) state.trace.add_stages()->set_stage(s);
  v1::StageAssignment assignment;
  assignment.set_job_name(state.name());
  assignment.set_attempt(status.attempt());
  *assignment.mutable_spec() = state.spec();
  if (status.attempt() > 1 && !state.spec().checkpoint().directory().empty()) {
    assignment.mutable_spec()->mutable_checkpoint()->set_resume(true);
  }
  for (const std::string& id : worker_ids) {
    assignment.add_stage_addresses(workers_.at(id).registration.link_address());
  }
  for (int s = 0; s < P; ++s) {
    workers_.Assign(worker_ids[s], state.name(), status.attempt(), s);
    const WorkerRegistry::Worker& worker = workers_.at(worker_ids[s]);
    assignment.set_stage(s);
    v1::CoordinatorMessage message;
    *message.mutable_assign() = assignment;
    pending_.messages.emplace_back(worker.sender, std::move(message));
    v1::StageStatus* stage = status.add_stages();
    stage->set_stage(s);
    stage->set_worker_id(worker_ids[s]);
    stage->set_link_address(worker.registration.link_address());
    stage->set_metrics_address(worker.registration.metrics_address());
    stage->set_pid(worker.registration.pid());
  }
  metrics_.ObserveSchedulingLatency(absl::ToDoubleSeconds(now - state.queued_since));
  if (!status.has_start_time()) *status.mutable_start_time() = ToProto(now);
  SetConditionLocked(state, "Unschedulable", false, "Placed", "");
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
  state.queued_since = clock_();
  state.workers.clear();
  SetPhaseLocked(state, v1::RESTARTING, reason,
                 absl::StrCat(message, "; restarting from step ", status.checkpoint_step()));
  ChangedLocked(state, true);
}

void JobManager::FinishLocked(JobState& state, v1::JobPhase phase, const std::string& reason,
                              const std::string& message) {
  if (phase != v1::SUCCEEDED) StopWorkersLocked(state, message);
  state.awaiting_reconnect = false;
  *state.status().mutable_completion_time() = ToProto(clock_());
  SetPhaseLocked(state, phase, reason, message);
  SetConditionLocked(state, "Stalled", false, "Finished", "");
  LOG(INFO) << "job " << state.name() << " " << v1::JobPhase_Name(phase) << ": " << message;
  ChangedLocked(state, true);
}

void JobManager::SetPhaseLocked(JobState& state, v1::JobPhase phase, const std::string& reason,
                                const std::string& message) {
  if (SetPhase(state.status(), phase, reason, message, clock_())) ChangedLocked(state, false);
}

void JobManager::SetConditionLocked(JobState& state, const std::string& type, bool value,
                                    const std::string& reason, const std::string& message) {
  if (SetCondition(state.status(), type, value, reason, message, clock_())) {
    ChangedLocked(state, false);
  }
}

void JobManager::ApplyReportLocked(JobState& state, const v1::StageReport& report) {
  const int s = report.stage();
  if (s < 0 || s >= static_cast<int>(state.stages.size()) || s >= state.status().stages_size()) {
    return;
  }
  const absl::Time now = clock_();
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
  const absl::Time now = clock_();
  if (!persist_now && now - state.last_persisted < options_.progress_persist_interval) return;
  state.last_persisted = now;
  // Written as it is at the end of the change (TakePendingLocked), once.
  const bool queued =
      std::any_of(pending_.writes.begin(), pending_.writes.end(),
                  [&](const v1::Job& job) { return job.name() == state.name(); });
  if (!queued) pending_.writes.push_back(state.job);
}

void JobManager::UpdateGaugesLocked() {
  std::map<v1::JobPhase, int> phases;
  for (const auto& [name, state] : jobs_) ++phases[state.job.status().phase()];
  for (v1::JobPhase p : kJobPhases) metrics_.SetJobsInPhase(PhaseName(p), phases[p]);
  const WorkerRegistry::Counts counts = workers_.Count();
  metrics_.SetWorkers("idle", counts.idle);
  metrics_.SetWorkers("busy", counts.busy);
  metrics_.SetWorkers("stopping", counts.stopping);
}

}  // namespace paci
