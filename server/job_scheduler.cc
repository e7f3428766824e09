#include "server/job_scheduler.h"

#include <algorithm>
#include <set>
#include <tuple>
#include <utility>

namespace paci {
namespace {

bool Matches(const WorkerSlot& worker, const std::map<std::string, std::string>& selector) {
  return UnmatchedLabel(worker.labels, selector) == nullptr;
}

}  // namespace

const std::string* UnmatchedLabel(const std::map<std::string, std::string>& labels,
                                  const std::map<std::string, std::string>& selector) {
  for (const auto& [key, value] : selector) {
    auto it = labels.find(key);
    if (it == labels.end() || it->second != value) return &key;
  }
  return nullptr;
}

SchedulingDecision ScheduleJobs(std::vector<PendingJob> queue, const std::vector<WorkerSlot>& workers) {
  std::sort(queue.begin(), queue.end(), [](const PendingJob& a, const PendingJob& b) {
    return std::forward_as_tuple(b.priority, a.sequence, a.name) <
           std::forward_as_tuple(a.priority, b.sequence, b.name);
  });
  // The pool without repeated ids, in the order given.
  std::vector<const WorkerSlot*> pool;
  std::set<std::string> seen;
  for (const WorkerSlot& worker : workers) {
    if (seen.insert(worker.worker_id).second) pool.push_back(&worker);
  }
  std::vector<bool> taken(pool.size(), false);
  SchedulingDecision decision;
  bool blocked = false;
  for (PendingJob& job : queue) {
    std::vector<size_t> free;  // idle, untaken matching workers, in pool order
    size_t matching = 0;
    for (size_t i = 0; i < pool.size(); ++i) {
      if (!Matches(*pool[i], job.selector)) continue;
      ++matching;
      if (pool[i]->idle && !taken[i]) free.push_back(i);
    }
    if (job.num_workers < 1 || matching < static_cast<size_t>(job.num_workers)) {
      decision.unschedulable.push_back(std::move(job.name));
    } else if (blocked || free.size() < static_cast<size_t>(job.num_workers)) {
      blocked = true;
      decision.waiting.push_back(std::move(job.name));
    } else {
      Placement& placement = decision.placements.emplace_back();
      placement.job_name = std::move(job.name);
      for (int s = 0; s < job.num_workers; ++s) {
        taken[free[s]] = true;
        placement.worker_ids.push_back(pool[free[s]]->worker_id);
      }
    }
  }
  return decision;
}

}  // namespace paci
