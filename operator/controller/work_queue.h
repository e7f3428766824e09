#pragma once

// The keys ("namespace/name") that need reconciling, as in client-go's rate
// limited work queue: a key is queued at most once however often it is
// added, is never handed to two workers at once (added again while being
// processed, it is queued again when Done), and can be delayed: AddAfter for
// polling, AddRateLimited for exponential backoff after failures.
//
// Thread-safe. Get blocks; ShutDown wakes every waiter. Delays are timed by
// Options::clock (a FakeClock in tests).

#include <deque>
#include <map>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"

namespace paci::op {

class WorkQueue {
 public:
  struct Options {
    absl::Duration base_delay = absl::Milliseconds(200);  // first retry after a failure
    absl::Duration max_delay = absl::Seconds(60);
    Clock* clock = &Clock::Real();
  };
  WorkQueue() : WorkQueue(Options{}) {}
  explicit WorkQueue(Options options) : options_(options) {}

  void Add(const std::string& key);
  void AddAfter(const std::string& key, absl::Duration delay);
  // Adds after base_delay * 2^(failures so far), at most max_delay.
  void AddRateLimited(const std::string& key);
  // The key succeeded: its next failure starts from base_delay again.
  void Forget(const std::string& key);
  int Failures(const std::string& key) const;

  // Blocks until a key is ready; false once shut down.
  bool Get(std::string* key);
  // The worker finished with `key` (taken by Get).
  void Done(const std::string& key);
  void ShutDown();
  // Keys waiting now (not counting delayed or in-process ones).
  size_t Depth() const;

 private:
  void AddLocked(const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_);

  const Options options_;
  mutable absl::Mutex mutex_;
  std::deque<std::string> queue_ ABSL_GUARDED_BY(mutex_);
  std::set<std::string> dirty_ ABSL_GUARDED_BY(mutex_);
  std::set<std::string> processing_ ABSL_GUARDED_BY(mutex_);
  std::multimap<absl::Time, std::string> delayed_ ABSL_GUARDED_BY(mutex_);
  std::map<std::string, int> failures_ ABSL_GUARDED_BY(mutex_);
  bool shut_down_ ABSL_GUARDED_BY(mutex_) = false;
};

}  // namespace paci::op
