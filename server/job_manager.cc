#include "server/job_manager.h"

#include <algorithm>

#include <glog/logging.h>
#include <google/protobuf/util/message_differencer.h>
#include <google/protobuf/util/time_util.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/job_scheduler.h"

namespace paci {
namespace {

using google::protobuf::util::TimeUtil;

google::protobuf::Timestamp ToProto(absl::Time t) {
  return TimeUtil::MicrosecondsToTimestamp(absl::ToUnixMicros(t));
}

// A phase as the job's conditions, the TrainingJob's status and the
// paci_coordinator_jobs{phase} label spell it.
const char* PhaseName(v1::JobPhase phase) {
  switch (phase) {
    case v1::QUEUED: return "Queued";
    case v1::RUNNING: return "Running";
    case v1::RESTARTING: return "Restarting";
    case v1::SUCCEEDED: return "Succeeded";
    case v1::FAILED: return "Failed";
    case v1::CANCELLED: return "Cancelled";
    default: return "Unknown";
  }
}

// Errors that another attempt would meet again: a bad spec or checkpoint.
bool IsPermanent(int code) {
  switch (static_cast<absl::StatusCode>(code)) {
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kNotFound:
      return true;
    default:
      return false;
  }
}

// Keeps a loss history bounded (so a job stays far below gRPC's 4 MiB message
// limit however long it trains): past kMaxHistory points, every other point
// is dropped, the latest always kept. Old training is then seen coarser.
constexpr int kMaxHistory = 10000;

void Thin(google::protobuf::RepeatedPtrField<v1::LossPoint>* points) {
  if (points->size() <= kMaxHistory) return;
  int kept = 0;
  for (int i = 0; i < points->size(); ++i) {
    if (i % 2 == 1 || i == points->size() - 1) points->SwapElements(kept++, i);
  }
  points->DeleteSubrange(kept, points->size() - kept);
}

}  // namespace

JobManager::JobManager(JobStore& store, CoordinatorMetrics& metrics,
                       const JobManagerOptions& options, Clock clock)
    : store_(store), metrics_(metrics), options_(options), clock_(std::move(clock)) {}

void JobManager::Send(const std::vector<std::pair<Sender, v1::CoordinatorMessage>>& messages) {
  for (const auto& [sender, message] : messages) sender(message);
}


absl::Status JobManager::Recover() {
  absl::StatusOr<std::vector<v1::Job>> jobs = store_.List();
  if (!jobs.ok()) return jobs.status();
  absl::MutexLock lock(&mu_);
  const absl::Time now = clock_();
  recovered_at_ = now;
  for (v1::Job& job : *jobs) {
    JobState state;
    state.sequence = next_sequence_++;
    state.queued_since = now;
    state.job = std::move(job);
    const int P = state.job.spec().pipeline().num_stages();
    if (state.job.status().phase() == v1::RUNNING) {
      state.awaiting_reconnect = true;
      state.workers.assign(P, "");
      state.stages.assign(P, StageProgress{});
      for (auto& stage : state.stages) stage.last_progress = now;
      state.attempt_started = now;
    }
    if (state.job.status().checkpoint_step() > 0) {
      for (int s = 0; s < P; ++s) state.shards[state.job.status().checkpoint_step()].insert(s);
    }
    const std::string name = state.job.name();
    if (!IsTerminal(state.job.status().phase())) metrics_.TrackJob(name);
    jobs_.emplace(name, std::move(state));
  }
  LOG(INFO) << "recovered " << jobs_.size() << " jobs from the store";
  UpdateGaugesLocked();
  return absl::OkStatus();
}

absl::StatusOr<v1::Job> JobManager::Submit(const v1::JobSpec& spec) {
  absl::StatusOr<v1::Job> result;
  LockedThenSend([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    auto it = jobs_.find(spec.name());
    if (it != jobs_.end()) {
      if (google::protobuf::util::MessageDifferencer::Equals(it->second.job.spec(), spec)) {
        result = it->second.job;
      } else {
        result = absl::AlreadyExistsError(absl::StrCat(
            "job \"", spec.name(), "\" exists with a different spec; choose another name"));
      }
    } else if (static_cast<int>(jobs_.size()) >= options_.max_jobs) {
      result = absl::ResourceExhaustedError(
          absl::StrCat("the coordinator holds ", jobs_.size(), " jobs, its limit"));
    } else {
      const absl::Time now = clock_();
      JobState state;
      state.sequence = next_sequence_++;
      state.queued_since = now;
      state.job.set_name(spec.name());
      *state.job.mutable_spec() = spec;
      v1::JobStatus* status = state.job.mutable_status();
      *status->mutable_create_time() = ToProto(now);
      status->set_total_steps(spec.training().steps());
      absl::Status stored = store_.Put(state.job);
      if (!stored.ok()) {
        result = absl::UnavailableError(
            absl::StrCat("cannot store job \"", spec.name(), "\": ", stored.message()));
      } else {
        JobState& job = jobs_.emplace(spec.name(), std::move(state)).first->second;
        metrics_.AddSubmission();
        metrics_.TrackJob(spec.name());
        SetPhaseLocked(job, v1::QUEUED, "Submitted", "waiting for workers");
        ChangedLocked(job, /*persist_now=*/true);
        ScheduleLocked();
        UpdateGaugesLocked();
        result = job.job;
      }
    }
  });
  return result;
}

absl::StatusOr<v1::Job> JobManager::Get(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(name);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no job \"", name, "\""));
  return it->second.job;
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
  LockedThenSend([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    auto it = jobs_.find(name);
    if (it == jobs_.end()) {
      result = absl::NotFoundError(absl::StrCat("no job \"", name, "\""));
    } else {
      if (!IsTerminal(it->second.job.status().phase())) {
        FinishLocked(it->second, v1::CANCELLED, "Cancelled", "cancelled by a client");
        ScheduleLocked();
      }
      result = it->second.job;
    }
  });
  return result;
}

absl::StatusOr<v1::JobTrace> JobManager::Trace(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = jobs_.find(name);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no job \"", name, "\""));
  return it->second.trace;
}

absl::StatusOr<v1::Job> JobManager::WaitForChange(const std::string& name, int64_t after_version,
                                                  absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto changed = [&]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    auto it = jobs_.find(name);
    return it == jobs_.end() || it->second.job.version() > after_version;
  };
  mu_.AwaitWithTimeout(absl::Condition(&changed), timeout);
  auto it = jobs_.find(name);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no job \"", name, "\""));
  return it->second.job;
}

absl::Status JobManager::Connect(const v1::WorkerRegistration& registration, Sender sender) {
  absl::Status result;
  LockedThenSend([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    const std::string& id = registration.worker_id();
    if (workers_.count(id)) {
      result = absl::AlreadyExistsError(absl::StrCat("worker \"", id, "\" is already connected"));
    } else {
      Worker& worker = workers_[id];
      worker.registration = registration;
      worker.sender = std::move(sender);
      worker.last_seen = clock_();
      worker_order_.push_back(id);
      LOG(INFO) << "worker " << id << " connected: link " << registration.link_address();
      const v1::StageAssignment& running = registration.running();
      if (!running.job_name().empty()) {
        // It was running a stage before the coordinator restarted.
        auto it = jobs_.find(running.job_name());
        const bool ours = it != jobs_.end() && it->second.awaiting_reconnect &&
                          it->second.job.status().attempt() == running.attempt() &&
                          running.stage() >= 0 &&
                          running.stage() < static_cast<int>(it->second.workers.size());
        worker.job = running.job_name();
        worker.attempt = running.attempt();
        worker.stage = running.stage();
        if (ours) {
          JobState& job = it->second;
          job.workers[running.stage()] = id;
          if (std::count(job.workers.begin(), job.workers.end(), "") == 0) {
            job.awaiting_reconnect = false;
            LOG(INFO) << "job " << job.job.name() << " reconciled with its workers";
            SetConditionLocked(job, "Running", true, "Reconciled",
                               "every stage's worker came back after a coordinator restart");
            ChangedLocked(job, true);
          }
        } else {
          worker.stopping = true;
          v1::CoordinatorMessage stop;
          stop.mutable_stop()->set_job_name(running.job_name());
          stop.mutable_stop()->set_attempt(running.attempt());
          stop.mutable_stop()->set_reason("the coordinator no longer runs this placement");
          outbox_.emplace_back(worker.sender, stop);
        }
      }
      ScheduleLocked();
      UpdateGaugesLocked();
    }
  });
  return result;
}

void JobManager::OnHeartbeat(const std::string& worker_id) {
  absl::MutexLock lock(&mu_);
  auto it = workers_.find(worker_id);
  if (it != workers_.end()) it->second.last_seen = clock_();
}

void JobManager::OnReport(const std::string& worker_id, const v1::StageReport& report) {
  LockedThenSend([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    auto w = workers_.find(worker_id);
    if (w != workers_.end()) {
      Worker& worker = w->second;
      worker.last_seen = clock_();
      const bool final = report.finished() || !report.error().empty();
      const bool from_its_stage =
          worker.job == report.job_name() && worker.attempt == report.attempt();
      auto j = jobs_.find(report.job_name());
      if (j != jobs_.end() && from_its_stage && !worker.stopping &&
          j->second.job.status().phase() == v1::RUNNING &&
          j->second.job.status().attempt() == report.attempt() &&
          report.stage() == worker.stage) {
        JobState& job = j->second;
        ApplyReportLocked(job, report);
        if (!report.error().empty()) {
          FailAttemptLocked(job, "StageFailed",
                            absl::StrCat("stage ", report.stage(), " on worker ", worker_id, ": ",
                                         report.error()),
                            IsPermanent(report.error_code()));
        } else if (report.finished()) {
          job.stages[report.stage()].finished = true;
          if (std::all_of(job.stages.begin(), job.stages.end(),
                          [](const StageProgress& s) { return s.finished; })) {
            FinishLocked(job, v1::SUCCEEDED, "Completed",
                         absl::StrCat("trained ", job.job.status().step(), " steps"));
          }
        }
      }
      if (final && from_its_stage) {
        worker.job.clear();
        worker.stage = -1;
        worker.stopping = false;
      }
      ScheduleLocked();
      UpdateGaugesLocked();
    }
  });
}

void JobManager::Disconnect(const std::string& worker_id) {
  LockedThenSend([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    RemoveWorkerLocked(worker_id, "its stream closed");
    ScheduleLocked();
    UpdateGaugesLocked();
  });
}

void JobManager::RemoveWorkerLocked(const std::string& worker_id, const std::string& why) {
  auto it = workers_.find(worker_id);
  if (it == workers_.end()) return;
  const Worker worker = it->second;
  workers_.erase(it);
  worker_order_.erase(std::remove(worker_order_.begin(), worker_order_.end(), worker_id),
                      worker_order_.end());
  LOG(WARNING) << "worker " << worker_id << " is gone: " << why;
  if (worker.job.empty() || worker.stopping) return;
  auto j = jobs_.find(worker.job);
  if (j == jobs_.end()) return;
  JobState& job = j->second;
  if (job.job.status().attempt() != worker.attempt) return;
  if (job.awaiting_reconnect && worker.stage >= 0 &&
      worker.stage < static_cast<int>(job.workers.size())) {
    job.workers[worker.stage] = "";
  }
  FailAttemptLocked(job, "WorkerLost",
                    absl::StrCat("worker ", worker_id, " running stage ", worker.stage, " is gone (",
                                 why, ")"),
                    /*permanent=*/false);
}

void JobManager::Tick() {
  LockedThenSend([&]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    const absl::Time now = clock_();
    std::vector<std::string> silent;
    for (const auto& [id, worker] : workers_) {
      if (now - worker.last_seen > options_.heartbeat_timeout) silent.push_back(id);
    }
    for (const std::string& id : silent) {
      RemoveWorkerLocked(id, absl::StrCat("no heartbeat for ",
                                          absl::FormatDuration(options_.heartbeat_timeout)));
    }
    for (auto& [name, job] : jobs_) {
      v1::JobStatus& status = *job.job.mutable_status();
      if (job.awaiting_reconnect && now - recovered_at_ > options_.reconnect_grace) {
        job.awaiting_reconnect = false;
        const int missing = std::count(job.workers.begin(), job.workers.end(), "");
        FailAttemptLocked(job, "WorkersLost",
                          absl::StrCat("after a coordinator restart ", missing, " of ",
                                       job.workers.size(), " stage workers did not come back"),
                          /*permanent=*/false);
      }
      const int64_t deadline = job.job.spec().run_policy().active_deadline_seconds();
      if (deadline > 0 && status.has_start_time() && !IsTerminal(status.phase())) {
        const absl::Time started =
            absl::FromUnixMicros(TimeUtil::TimestampToMicroseconds(status.start_time()));
        if (now - started > absl::Seconds(deadline)) {
          FinishLocked(job, v1::FAILED, "DeadlineExceeded",
                       absl::StrCat("the job ran longer than activeDeadlineSeconds (", deadline,
                                    " s)"));
          continue;
        }
      }
      if (status.phase() == v1::RUNNING && !job.awaiting_reconnect) {
        std::vector<std::string> stalled;
        for (size_t s = 0; s < job.stages.size(); ++s) {
          if (!job.stages[s].finished && now - job.stages[s].last_progress > options_.stall_timeout) {
            stalled.push_back(absl::StrCat("stage ", s, " on worker ", job.workers[s]));
          }
        }
        if (!stalled.empty()) {
          SetConditionLocked(job, "Stalled", true, "StageStalled",
                             absl::StrCat(absl::StrJoin(stalled, ", "), " made no progress for ",
                                          absl::FormatDuration(options_.stall_timeout)));
        } else {
          SetConditionLocked(job, "Stalled", false, "Progressing", "every stage is progressing");
        }
      }
    }
    ScheduleLocked();
    UpdateGaugesLocked();
  });
}

size_t JobManager::connected_workers() const {
  absl::MutexLock lock(&mu_);
  return workers_.size();
}

void JobManager::ScheduleLocked() {
  std::vector<PendingJob> queue;
  for (const auto& [name, job] : jobs_) {
    const v1::JobPhase phase = job.job.status().phase();
    if ((phase != v1::QUEUED && phase != v1::RESTARTING) || job.awaiting_reconnect) continue;
    // A restarting job waits until every worker of its last attempt let go.
    const bool released = std::none_of(workers_.begin(), workers_.end(), [&](const auto& w) {
      return w.second.job == name;
    });
    if (!released) continue;
    PendingJob pending;
    pending.name = name;
    pending.priority = job.job.spec().run_policy().priority();
    pending.sequence = job.sequence;
    pending.num_stages = job.job.spec().pipeline().num_stages();
    for (const auto& [k, v] : job.job.spec().run_policy().worker_selector()) pending.selector[k] = v;
    queue.push_back(std::move(pending));
  }
  if (queue.empty()) return;
  std::vector<WorkerSlot> slots;
  for (const std::string& id : worker_order_) {
    const Worker& worker = workers_.at(id);
    WorkerSlot slot;
    slot.worker_id = id;
    for (const auto& [k, v] : worker.registration.labels()) slot.labels[k] = v;
    slot.idle = worker.job.empty();
    slots.push_back(std::move(slot));
  }
  SchedulingDecision decision = ScheduleJobs(std::move(queue), slots);
  for (const Placement& placement : decision.placements) {
    PlaceLocked(jobs_.at(placement.job_name), placement.worker_ids);
  }
  for (const std::string& name : decision.unschedulable) {
    JobState& job = jobs_.at(name);
    SetConditionLocked(job, "Unschedulable", true, "NoMatchingWorkers",
                       absl::StrCat("fewer than ", job.job.spec().pipeline().num_stages(),
                                    " connected workers match the job's worker selector"));
  }
}

void JobManager::PlaceLocked(JobState& job, const std::vector<std::string>& worker_ids) {
  const absl::Time now = clock_();
  v1::JobStatus& status = *job.job.mutable_status();
  status.set_attempt(status.attempt() + 1);
  const int P = static_cast<int>(worker_ids.size());
  job.workers = worker_ids;
  job.stages.assign(P, StageProgress{});
  for (auto& stage : job.stages) stage.last_progress = now;
  job.attempt_started = now;
  status.clear_stages();
  job.trace.Clear();
  job.trace.set_name(job.job.name());
  for (int s = 0; s < P; ++s) job.trace.add_stages()->set_stage(s);
  v1::StageAssignment assignment;
  assignment.set_job_name(job.job.name());
  assignment.set_attempt(status.attempt());
  *assignment.mutable_spec() = job.job.spec();
  if (status.attempt() > 1 && !job.job.spec().checkpoint().directory().empty()) {
    assignment.mutable_spec()->mutable_checkpoint()->set_resume(true);
  }
  for (const std::string& id : worker_ids) {
    assignment.add_stage_addresses(workers_.at(id).registration.link_address());
  }
  for (int s = 0; s < P; ++s) {
    Worker& worker = workers_.at(worker_ids[s]);
    worker.job = job.job.name();
    worker.attempt = status.attempt();
    worker.stage = s;
    worker.stopping = false;
    assignment.set_stage(s);
    v1::CoordinatorMessage message;
    *message.mutable_assign() = assignment;
    outbox_.emplace_back(worker.sender, message);
    v1::StageStatus* stage = status.add_stages();
    stage->set_stage(s);
    stage->set_worker_id(worker_ids[s]);
    stage->set_link_address(worker.registration.link_address());
    stage->set_metrics_address(worker.registration.metrics_address());
    stage->set_pid(worker.registration.pid());
  }
  metrics_.ObserveSchedulingLatency(absl::ToDoubleSeconds(now - job.queued_since));
  if (!status.has_start_time()) *status.mutable_start_time() = ToProto(now);
  SetConditionLocked(job, "Unschedulable", false, "Placed", "");
  SetPhaseLocked(job, v1::RUNNING, "Placed",
                 absl::StrCat("attempt ", status.attempt(), " on workers ",
                              absl::StrJoin(worker_ids, ", ")));
  LOG(INFO) << "job " << job.job.name() << " attempt " << status.attempt() << " placed on "
            << absl::StrJoin(worker_ids, ", ");
  ChangedLocked(job, true);
}

void JobManager::StopWorkersLocked(JobState& job, const std::string& reason) {
  for (auto& [id, worker] : workers_) {
    if (worker.job != job.job.name() || worker.stopping) continue;
    worker.stopping = true;
    v1::CoordinatorMessage message;
    message.mutable_stop()->set_job_name(worker.job);
    message.mutable_stop()->set_attempt(worker.attempt);
    message.mutable_stop()->set_reason(reason);
    outbox_.emplace_back(worker.sender, message);
  }
}

void JobManager::FailAttemptLocked(JobState& job, const std::string& reason,
                                   const std::string& message, bool permanent) {
  v1::JobStatus& status = *job.job.mutable_status();
  if (status.phase() != v1::RUNNING) return;
  LOG(WARNING) << "job " << job.job.name() << " attempt " << status.attempt() << ": " << message;
  const int backoff_limit = job.job.spec().run_policy().backoff_limit();
  if (permanent) {
    FinishLocked(job, v1::FAILED, reason, message);
    return;
  }
  if (status.restarts() >= backoff_limit) {
    FinishLocked(job, v1::FAILED, "BackoffLimitExceeded",
                 absl::StrCat(message, "; restarted ", status.restarts(),
                              " times, backoffLimit is ", backoff_limit));
    return;
  }
  StopWorkersLocked(job, message);
  status.set_restarts(status.restarts() + 1);
  metrics_.AddRestart(job.job.name());
  job.queued_since = clock_();
  job.workers.clear();
  SetPhaseLocked(job, v1::RESTARTING, reason,
                 absl::StrCat(message, "; restarting from step ", status.checkpoint_step()));
  ChangedLocked(job, true);
}

void JobManager::FinishLocked(JobState& job, v1::JobPhase phase, const std::string& reason,
                              const std::string& message) {
  if (phase != v1::SUCCEEDED) StopWorkersLocked(job, message);
  job.awaiting_reconnect = false;
  *job.job.mutable_status()->mutable_completion_time() = ToProto(clock_());
  SetPhaseLocked(job, phase, reason, message);
  SetConditionLocked(job, "Stalled", false, "Finished", "");
  LOG(INFO) << "job " << job.job.name() << " " << v1::JobPhase_Name(phase) << ": " << message;
  ChangedLocked(job, true);
}

void JobManager::SetPhaseLocked(JobState& job, v1::JobPhase phase, const std::string& reason,
                                const std::string& message) {
  v1::JobStatus& status = *job.job.mutable_status();
  status.set_phase(phase);
  status.set_reason(reason);
  status.set_message(message);
  for (v1::JobPhase p : {v1::QUEUED, v1::RUNNING, v1::RESTARTING, v1::SUCCEEDED, v1::FAILED,
                         v1::CANCELLED}) {
    if (p == phase) {
      SetConditionLocked(job, PhaseName(p), true, reason, message);
    } else {
      for (const auto& c : status.conditions()) {
        if (c.type() == PhaseName(p) && c.status()) {
          SetConditionLocked(job, PhaseName(p), false, reason, "");
        }
      }
    }
  }
}

void JobManager::SetConditionLocked(JobState& job, const std::string& type, bool value,
                                    const std::string& reason, const std::string& message) {
  v1::JobStatus& status = *job.job.mutable_status();
  for (auto& c : *status.mutable_conditions()) {
    if (c.type() != type) continue;
    if (c.status() == value && c.reason() == reason && c.message() == message) return;
    if (c.status() != value) *c.mutable_last_transition_time() = ToProto(clock_());
    c.set_status(value);
    c.set_reason(reason);
    c.set_message(message);
    ChangedLocked(job, false);
    return;
  }
  if (!value) return;  // a condition that never held is not listed
  v1::JobCondition* c = status.add_conditions();
  c->set_type(type);
  c->set_status(true);
  c->set_reason(reason);
  c->set_message(message);
  *c->mutable_last_transition_time() = ToProto(clock_());
  ChangedLocked(job, false);
}

void JobManager::ApplyReportLocked(JobState& job, const v1::StageReport& report) {
  const absl::Time now = clock_();
  v1::JobStatus& status = *job.job.mutable_status();
  const int s = report.stage();
  StageProgress& progress = job.stages[s];
  if (report.optimizer_steps() != progress.last_step) {
    progress.last_step = report.optimizer_steps();
    progress.last_progress = now;
  }
  progress.latest = report;
  v1::StageStatus& stage = *status.mutable_stages(s);
  stage.set_optimizer_steps(report.optimizer_steps());
  stage.set_drift_max(report.drift_max());
  stage.set_drift_bound(report.drift_bound());
  stage.set_drift_mean(report.drift_count() ? double(report.drift_sum()) / report.drift_count() : 0);
  stage.set_busy_seconds(report.busy_seconds());
  stage.set_idle_seconds(report.idle_seconds());
  stage.set_peak_rss_bytes(report.peak_rss_bytes());
  stage.set_bytes_sent(report.bytes_sent());
  stage.set_forward_micro_batches(report.forward_micro_batches());
  stage.set_backward_micro_batches(report.backward_micro_batches());
  for (const auto& point : report.train_loss()) {
    *status.add_train_loss_history() = point;
    status.set_train_loss(point.loss());
  }
  for (const auto& point : report.validation_loss()) {
    *status.add_validation_loss_history() = point;
    status.set_validation_loss(point.loss());
  }
  Thin(status.mutable_train_loss_history());
  Thin(status.mutable_validation_loss_history());
  const int P = static_cast<int>(job.stages.size());
  if (s < job.trace.stages_size()) {
    v1::StageTrace& trace = *job.trace.mutable_stages(s);
    const int64_t room = job.job.spec().runtime().trace_max_spans() - trace.spans_size();
    for (int i = 0; i < report.spans_size() && i < room; ++i) *trace.add_spans() = report.spans(i);
    trace.set_spans_dropped(report.spans_dropped() +
                            std::max<int64_t>(0, report.spans_size() - std::max<int64_t>(room, 0)));
  }
  for (int64_t step : report.checkpoint_steps()) {
    auto& saved = job.shards[step];
    saved.insert(s);
    if (static_cast<int>(saved.size()) == P && step > status.checkpoint_step()) {
      status.set_checkpoint_step(step);
    }
  }
  int64_t step = std::numeric_limits<int64_t>::max();
  for (const auto& st : status.stages()) step = std::min(step, st.optimizer_steps());
  status.set_step(step);
  if (s == P - 1) {
    const double seconds = absl::ToDoubleSeconds(now - job.attempt_started);
    if (seconds > 0) status.set_tokens_per_second(report.tokens() / seconds);
  }
  metrics_.SetJobProgress(job.job.name(), step, status.train_loss(), status.validation_loss());
  ChangedLocked(job, /*persist_now=*/!report.checkpoint_steps().empty());
}

void JobManager::ChangedLocked(JobState& job, bool persist_now) {
  job.job.set_version(job.job.version() + 1);
  const absl::Time now = clock_();
  if (!persist_now && now - job.last_persisted < options_.progress_persist_interval) return;
  job.last_persisted = now;
  absl::Status stored = store_.Put(job.job);
  if (!stored.ok()) LOG(ERROR) << "cannot store job " << job.job.name() << ": " << stored;
}

void JobManager::UpdateGaugesLocked() {
  std::map<v1::JobPhase, int> phases;
  for (const auto& [name, job] : jobs_) ++phases[job.job.status().phase()];
  for (v1::JobPhase p : {v1::QUEUED, v1::RUNNING, v1::RESTARTING, v1::SUCCEEDED, v1::FAILED,
                         v1::CANCELLED}) {
    metrics_.SetJobsInPhase(PhaseName(p), phases[p]);
  }
  int idle = 0, busy = 0, stopping = 0;
  for (const auto& [id, worker] : workers_) {
    if (worker.stopping) {
      ++stopping;
    } else if (worker.job.empty()) {
      ++idle;
    } else {
      ++busy;
    }
  }
  metrics_.SetWorkers("idle", idle);
  metrics_.SetWorkers("busy", busy);
  metrics_.SetWorkers("stopping", stopping);
}

}  // namespace paci
