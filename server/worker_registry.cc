#include "server/worker_registry.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/peer_identity.h"

namespace paci {

absl::StatusOr<WorkerRegistry::Worker*> WorkerRegistry::Add(
    const v1::WorkerRegistration& registration, Sender sender, const std::string& name_space) {
  const std::string& id = registration.worker_id();
  if (workers_.count(id)) {
    return absl::AlreadyExistsError(absl::StrCat("worker \"", id, "\" is already connected"));
  }
  Worker& worker = workers_[id];
  worker.registration = registration;
  worker.name_space = name_space;
  worker.sender = std::move(sender);
  order_.push_back(id);
  return &worker;
}

WorkerRegistry::Worker* WorkerRegistry::Find(const std::string& id) {
  auto it = workers_.find(id);
  return it == workers_.end() ? nullptr : &it->second;
}

std::optional<WorkerRegistry::Worker> WorkerRegistry::Remove(const std::string& id) {
  auto it = workers_.find(id);
  if (it == workers_.end()) return std::nullopt;
  Worker worker = std::move(it->second);
  workers_.erase(it);
  order_.erase(std::remove(order_.begin(), order_.end(), id), order_.end());
  return worker;
}

void WorkerLiveness::Add(const std::string& id, absl::Time now) {
  absl::MutexLock lock(&mu_);
  seen_[id] = Seen{now};
}

void WorkerLiveness::Remove(const std::string& id) {
  absl::MutexLock lock(&mu_);
  seen_.erase(id);
}

void WorkerLiveness::Touch(const std::string& id, absl::Time now) {
  absl::MutexLock lock(&mu_);
  auto it = seen_.find(id);
  if (it != seen_.end()) it->second.last = std::max(it->second.last, now);
}

void WorkerLiveness::Begin(const std::string& id, absl::Time now) {
  absl::MutexLock lock(&mu_);
  auto it = seen_.find(id);
  if (it == seen_.end()) return;
  it->second.last = std::max(it->second.last, now);
  ++it->second.handling;
}

void WorkerLiveness::End(const std::string& id, absl::Time now) {
  absl::MutexLock lock(&mu_);
  auto it = seen_.find(id);
  if (it == seen_.end()) return;
  it->second.last = std::max(it->second.last, now);
  // A worker that connected again meanwhile was added anew, at 0.
  it->second.handling = std::max(0, it->second.handling - 1);
}

std::vector<std::string> WorkerLiveness::Silent(absl::Time now, absl::Duration timeout) const {
  std::vector<std::string> silent;
  absl::MutexLock lock(&mu_);
  for (const auto& [id, seen] : seen_) {
    if (seen.handling == 0 && now - seen.last > timeout) silent.push_back(id);
  }
  return silent;
}

void WorkerRegistry::Assign(const std::string& id, const std::string& job, int64_t attempt,
                            int slot) {
  Worker& worker = workers_.at(id);
  worker.job = job;
  worker.attempt = attempt;
  worker.slot = slot;
  worker.stopping = false;
}

void WorkerRegistry::Release(Worker& worker) {
  worker.job.clear();
  worker.slot = -1;
  worker.stopping = false;
}

v1::CoordinatorMessage WorkerRegistry::StopMessage(const std::string& job, int64_t attempt,
                                                   const std::string& reason) {
  v1::CoordinatorMessage message;
  message.mutable_stop()->set_job_name(job);
  message.mutable_stop()->set_attempt(attempt);
  message.mutable_stop()->set_reason(reason);
  return message;
}

std::vector<std::pair<WorkerRegistry::Sender, v1::CoordinatorMessage>> WorkerRegistry::StopJob(
    const std::string& job, const std::string& reason) {
  std::vector<std::pair<Sender, v1::CoordinatorMessage>> messages;
  for (auto& [id, worker] : workers_) {
    if (worker.job != job || worker.stopping) continue;
    worker.stopping = true;
    messages.emplace_back(worker.sender, StopMessage(worker.job, worker.attempt, reason));
  }
  return messages;
}

bool WorkerRegistry::Holds(const std::string& job) const {
  return std::any_of(workers_.begin(), workers_.end(),
                     [&](const auto& entry) { return entry.second.job == job; });
}

std::vector<WorkerSlot> WorkerRegistry::Slots() const {
  std::vector<WorkerSlot> slots;
  for (const std::string& id : order_) {
    const Worker& worker = workers_.at(id);
    WorkerSlot slot;
    slot.worker_id = id;
    slot.labels = SchedulingLabels(worker.registration, worker.name_space);
    slot.idle = worker.job.empty();
    slots.push_back(std::move(slot));
  }
  return slots;
}

std::map<std::string, std::string> WorkerRegistry::SchedulingLabels(
    const v1::WorkerRegistration& registration, const std::string& name_space) {
  std::map<std::string, std::string> labels(registration.labels().begin(),
                                            registration.labels().end());
  labels[kNamespaceLabel] = name_space;
  return labels;
}

WorkerRegistry::Counts WorkerRegistry::Count() const {
  Counts counts;
  for (const auto& [id, worker] : workers_) {
    if (worker.stopping) {
      ++counts.stopping;
    } else if (worker.job.empty()) {
      ++counts.idle;
    } else {
      ++counts.busy;
    }
  }
  return counts;
}

}  // namespace paci
