#include "server/job_queue.h"

#include <tuple>

namespace paci {
namespace {

bool Matches(const std::map<std::string, std::string>& labels,
             const std::map<std::string, std::string>& selector) {
  return UnmatchedLabel(labels, selector) == nullptr;
}

}  // namespace

bool JobQueue::Key::operator<(const Key& other) const {
  return std::forward_as_tuple(other.priority, sequence, name) <
         std::forward_as_tuple(priority, other.sequence, other.name);
}

void JobQueue::Add(const PendingJob& job) {
  Remove(job.name);
  Entry& entry = jobs_[job.name];
  entry.job = job;
  ready_.insert(Key{job.priority, job.sequence, job.name});
}

bool JobQueue::Remove(const std::string& name) {
  auto it = jobs_.find(name);
  if (it == jobs_.end()) return false;
  const PendingJob& job = it->second.job;
  if (it->second.parked) {
    auto group = parked_.find(job.selector);
    auto [first, last] = group->second.equal_range(job.num_workers);
    for (auto member = first; member != last; ++member) {
      if (member->second == name) {
        group->second.erase(member);
        break;
      }
    }
    if (group->second.empty()) {
      IndexOf(job.selector).erase(job.selector);
      parked_.erase(group);
    }
  } else {
    ready_.erase(Key{job.priority, job.sequence, job.name});
  }
  jobs_.erase(it);
  return true;
}

std::set<JobQueue::Selector>& JobQueue::IndexOf(const Selector& selector) {
  if (selector.empty()) return parked_any_;
  return parked_by_label_[*selector.begin()];
}

void JobQueue::Park(Entry& entry) {
  const PendingJob& job = entry.job;
  ready_.erase(Key{job.priority, job.sequence, job.name});
  entry.parked = true;
  parked_[job.selector].emplace(job.num_workers, job.name);
  IndexOf(job.selector).insert(job.selector);
}

void JobQueue::Unpark(const std::string& name) {
  Entry& entry = jobs_.at(name);
  entry.parked = false;
  ready_.insert(Key{entry.job.priority, entry.job.sequence, entry.job.name});
}

void JobQueue::WorkerAdded(const std::map<std::string, std::string>& labels,
                           const std::vector<WorkerSlot>& workers) {
  std::vector<Selector> candidates(parked_any_.begin(), parked_any_.end());
  for (const auto& label : labels) {
    auto it = parked_by_label_.find(label);
    if (it != parked_by_label_.end()) candidates.insert(candidates.end(), it->second.begin(), it->second.end());
  }
  for (const Selector& selector : candidates) {
    if (!Matches(labels, selector)) continue;
    std::set<std::string> seen;
    int matching = 0;
    for (const WorkerSlot& worker : workers) {
      if (seen.insert(worker.worker_id).second && Matches(worker.labels, selector)) ++matching;
    }
    auto group = parked_.find(selector);
    if (group == parked_.end()) continue;
    // Jobs of 1 .. matching stages can now be run by the pool.
    auto first = group->second.lower_bound(1);
    auto last = group->second.upper_bound(matching);
    for (auto member = first; member != last; ++member) Unpark(member->second);
    group->second.erase(first, last);
    if (group->second.empty()) {
      IndexOf(selector).erase(selector);
      parked_.erase(group);
    }
  }
  for (auto it = parked_by_label_.begin(); it != parked_by_label_.end();) {
    it = it->second.empty() ? parked_by_label_.erase(it) : std::next(it);
  }
}

SchedulingDecision JobQueue::Schedule(const std::vector<WorkerSlot>& workers) {
  SchedulingDecision decision;
  if (ready_.empty()) return decision;
  // The pool without repeated ids, in the order given.
  std::vector<const WorkerSlot*> pool;
  std::set<std::string> seen;
  for (const WorkerSlot& worker : workers) {
    if (seen.insert(worker.worker_id).second) pool.push_back(&worker);
  }
  std::vector<bool> taken(pool.size(), false);
  for (auto it = ready_.begin(); it != ready_.end();) {
    Entry& entry = jobs_.at(it->name);
    ++it;  // the job may leave ready_ below
    const PendingJob& job = entry.job;
    std::vector<size_t> free;  // idle, untaken matching workers, in pool order
    size_t matching = 0;
    for (size_t i = 0; i < pool.size(); ++i) {
      if (!Matches(pool[i]->labels, job.selector)) continue;
      ++matching;
      if (pool[i]->idle && !taken[i]) free.push_back(i);
    }
    if (job.num_workers < 1 || matching < static_cast<size_t>(job.num_workers)) {
      decision.unschedulable.push_back(job.name);
      Park(entry);
    } else if (free.size() < static_cast<size_t>(job.num_workers)) {
      decision.waiting.push_back(job.name);
      break;
    } else {
      Placement& placement = decision.placements.emplace_back();
      placement.job_name = job.name;
      for (int s = 0; s < job.num_workers; ++s) {
        taken[free[s]] = true;
        placement.worker_ids.push_back(pool[free[s]]->worker_id);
      }
      Remove(placement.job_name);
    }
  }
  return decision;
}

}  // namespace paci
