#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "server/job_scheduler.h"

namespace paci {

// The jobs waiting for workers, indexed so that a scheduling pass costs what
// it decides rather than how many jobs wait: the incremental form of
// ScheduleJobs. Pure: no clock, no I/O, no lock (its owner holds one).
//
// Jobs are kept in ScheduleJobs's order (priority, higher first; then
// sequence; then name) in two parts:
//   - ready: jobs that the pool could run when they were last looked at;
//   - parked: jobs found unschedulable (fewer registered workers match their
//     selector than they have stages), grouped by selector and indexed by
//     one of its labels, so a registering worker finds the groups it may
//     unblock without looking at any other job.
// A shrinking pool only makes jobs unschedulable, which Schedule finds when it
// reaches them; a growing one (WorkerAdded) unparks exactly the jobs of the
// groups the new worker matches whose stage count the pool now covers.
class JobQueue {
 public:
  // Adds a waiting job (ready), or replaces the one of that name.
  void Add(const PendingJob& job);
  // Removes the job; false when it is not queued.
  bool Remove(const std::string& name);
  bool Contains(const std::string& name) const { return jobs_.count(name) > 0; }
  // Every queued job, ready or parked.
  size_t size() const { return jobs_.size(); }
  size_t parked() const { return jobs_.size() - ready_.size(); }

  // A worker carrying `labels` registered; `workers` is the pool with it.
  // Work: the parked groups whose selector the worker matches, each counted
  // against the pool, plus the jobs unparked.
  void WorkerAdded(const std::map<std::string, std::string>& labels,
                   const std::vector<WorkerSlot>& workers);

  // One pass over the ready jobs, in order, with `workers` (registration
  // order), deciding as ScheduleJobs would for the same queue and pool:
  // placements are identical. It stops at the first job that fits the pool
  // but not the idle workers (no later job may jump it), so `waiting` holds
  // that one job at most, and `unschedulable` only the jobs found so in this
  // pass (they are parked; later passes skip them). Placed jobs leave the
  // queue. Work: O((placed + newly parked + 1) * workers).
  SchedulingDecision Schedule(const std::vector<WorkerSlot>& workers);

 private:
  using Selector = std::map<std::string, std::string>;
  struct Key {
    int priority;
    int64_t sequence;
    std::string name;
    bool operator<(const Key& other) const;
  };
  struct Entry {
    PendingJob job;
    bool parked = false;
  };
  // A parked group's jobs by stage count.
  using Group = std::multimap<int, std::string>;

  void Park(Entry& entry);
  void Unpark(const std::string& name);
  // The index of parked groups: the empty selector, or the selector's first label.
  std::set<Selector>& IndexOf(const Selector& selector);

  std::map<std::string, Entry> jobs_;
  std::set<Key> ready_;
  std::map<Selector, Group> parked_;
  std::set<Selector> parked_any_;  // groups with an empty selector
  std::map<std::pair<std::string, std::string>, std::set<Selector>> parked_by_label_;
};

}  // namespace paci
