// The JobManager's side of the worker gateway: workers connecting (and, after
// a restart of the coordinator, coming back to the stages they run),
// reporting, beating and going away. The lifecycle they drive is in
// job_manager.cc.
#include <algorithm>

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "server/job_manager.h"
#include "server/job_placement.h"
#include "server/job_status.h"

namespace paci {

absl::Status JobManager::Connect(const v1::WorkerRegistration& registration, Sender sender,
                                 const std::string& name_space) {
  absl::Status result;
  Mutate([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    // Refused before anything changes.
    result = CheckRunningClaimLocked(registration, name_space);
    if (!result.ok()) return;
    absl::StatusOr<WorkerRegistry::Worker*> worker =
        workers_.Add(registration, std::move(sender), name_space);
    if (!worker.ok()) {
      result = worker.status();
      return;
    }
    liveness_.Add(registration.worker_id(), clock_.Now());
    LOG(INFO) << "worker " << registration.worker_id() << " connected: link "
              << registration.link_address()
              << (name_space.empty() ? std::string()
                                     : absl::StrCat(", runs the jobs of namespace ", name_space));
    if (!registration.running().job_name().empty()) AdoptLocked(**worker);
    queue_.WorkerAdded(WorkerRegistry::SchedulingLabels(registration, name_space),
                       workers_.Slots());
    ScheduleLocked();
    UpdateGaugesLocked();
  });
  return result;
}

absl::Status JobManager::CheckRunningClaimLocked(const v1::WorkerRegistration& registration,
                                                 const std::string& name_space) {
  const v1::StageAssignment& running = registration.running();
  if (running.job_name().empty()) return absl::OkStatus();
  const JobState* state = FindLocked(running.job_name());
  // A claim on a job no longer here, or on an earlier job of that name (its
  // create time), may be a stage the worker still ends: it is told to stop it,
  // and takes nothing (AdoptLocked).
  if (state == nullptr || FromProto(running.job_create_time()) !=
                              FromProto(state->status().create_time())) {
    return absl::OkStatus();
  }
  return CheckMayRun(state->job, WorkerRegistry::SchedulingLabels(registration, name_space));
}

void JobManager::AdoptLocked(WorkerRegistry::Worker& worker) {
  const v1::StageAssignment& running = worker.registration.running();
  const std::string& id = worker.registration.worker_id();
  JobState* state = FindLocked(running.job_name());
  // It must still be a worker the job would take: of the job's namespace, and
  // its selector (the job's token label among it) matches what the worker
  // registered with now. Else the claim holds no job (a job of that name
  // submitted later, or one this worker was never placed on, does not wait
  // for it): the worker is told to stop that stage, and is free.
  if (state == nullptr ||
      !CheckMayRun(state->job, WorkerRegistry::SchedulingLabels(worker.registration,
                                                                worker.name_space))
           .ok()) {
    pending_.messages.emplace_back(
        worker.sender, WorkerRegistry::StopMessage(running.job_name(), running.attempt(),
                                                   "the coordinator no longer runs this placement"));
    return;
  }
  worker.job = running.job_name();
  worker.attempt = running.attempt();
  worker.slot = SlotOf(state->spec(), running.stage(), running.replica());
  // Of this job, not of an earlier one of the same name.
  const bool same_job =
      FromProto(running.job_create_time()) == FromProto(state->status().create_time());
  const bool ours = same_job && state->awaiting_reconnect &&
                    state->status().attempt() == running.attempt() && worker.slot >= 0 &&
                    worker.slot < static_cast<int>(state->stages.size()) &&
                    state->worker(worker.slot) == id;
  if (!ours) {
    // A job that worker still holds waits for it to let go.
    queue_.Remove(state->name());
    worker.stopping = true;
    pending_.messages.emplace_back(
        worker.sender, WorkerRegistry::StopMessage(running.job_name(), running.attempt(),
                                                   "the coordinator no longer runs this placement"));
    return;
  }
  state->stages[worker.slot].reconnected = true;
  if (std::any_of(state->stages.begin(), state->stages.end(),
                  [](const StageProgress& s) { return !s.reconnected; })) {
    return;
  }
  state->awaiting_reconnect = false;
  LOG(INFO) << "job " << state->name() << " reconciled with its workers";
  SetConditionLocked(*state, "Running", true, "Reconciled",
                     "every stage's worker came back after a coordinator restart");
  ChangedLocked(*state, true);
}

void JobManager::OnHeartbeat(const std::string& worker_id) {
  // Not the JobManager's lock: a heartbeat never waits for a change of jobs,
  // a ListJobs or a watcher.
  liveness_.Touch(worker_id, clock_.Now());
}

void JobManager::OnReport(const std::string& worker_id, const v1::StageReport& report) {
  // Its heartbeats wait behind this report on its stream while the store
  // writes what the report changed, however slow the disk.
  liveness_.Begin(worker_id, clock_.Now());
  Mutate([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    WorkerRegistry::Worker* worker = workers_.Find(worker_id);
    if (worker == nullptr) return;
    const bool final = report.finished() || !report.error().empty();
    const bool from_its_stage =
        worker->job == report.job_name() && worker->attempt == report.attempt();
    JobState* state = FindLocked(report.job_name());
    const int slot =
        state == nullptr ? -1 : SlotOf(state->spec(), report.stage(), report.replica());
    if (state != nullptr && from_its_stage && !worker->stopping &&
        state->status().phase() == v1::RUNNING && state->status().attempt() == report.attempt() &&
        slot >= 0 && slot == worker->slot) {
      ApplyReportLocked(*state, report);
      if (!report.error().empty()) {
        FailAttemptLocked(*state, "StageFailed",
                          absl::StrCat(SlotName(state->spec(), slot), " on worker ", worker_id,
                                       ": ", report.error()),
                          IsPermanentError(report.error_code()));
      } else if (report.finished()) {
        state->status().mutable_stages(slot)->set_finished(true);
        const auto& stages = state->status().stages();
        if (std::all_of(stages.begin(), stages.end(),
                        [](const v1::StageStatus& s) { return s.finished(); })) {
          FinishLocked(*state, v1::SUCCEEDED, "Completed",
                       absl::StrCat("trained ", state->status().step(), " steps"));
        } else {
          ChangedLocked(*state, /*persist_now=*/true);  // a restarted coordinator must know
        }
      }
    }
    if (final && from_its_stage) {
      const std::string job = worker->job;
      WorkerRegistry::Release(*worker);
      EnqueueLocked(job);
    }
    ScheduleLocked();
    UpdateGaugesLocked();
  });
  liveness_.End(worker_id, clock_.Now());
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
  liveness_.Remove(worker_id);
  LOG(WARNING) << "worker " << worker_id << " is gone: " << why;
  if (worker->job.empty()) return;
  JobState* state = FindLocked(worker->job);
  if (state == nullptr) return;
  if (worker->stopping || state->status().attempt() != worker->attempt) {
    EnqueueLocked(*state);  // perhaps the last worker it waited for
    return;
  }
  if (state->awaiting_reconnect && worker->slot >= 0 &&
      worker->slot < static_cast<int>(state->stages.size())) {
    state->stages[worker->slot].reconnected = false;
  }
  FailAttemptLocked(*state, "WorkerLost",
                    absl::StrCat("worker ", worker_id, " running ",
                                 SlotName(state->spec(), worker->slot), " is gone (", why, ")"),
                    /*permanent=*/false);
  EnqueueLocked(*state);
}

}  // namespace paci
