#include "operator/controller/work_queue.h"

#include "common/backoff.h"

namespace paci::op {

void WorkQueue::AddLocked(const std::string& key) {
  if (shut_down_ || dirty_.count(key) != 0) return;
  dirty_.insert(key);
  if (processing_.count(key) == 0) queue_.push_back(key);
}

void WorkQueue::Add(const std::string& key) {
  absl::MutexLock lock(&mutex_);
  AddLocked(key);
}

void WorkQueue::AddAfter(const std::string& key, absl::Duration delay) {
  absl::MutexLock lock(&mutex_);
  if (delay <= absl::ZeroDuration()) {
    AddLocked(key);
    return;
  }
  // One pending delay per key is enough: keep the earliest.
  const absl::Time when = options_.clock->Now() + delay;
  for (auto it = delayed_.begin(); it != delayed_.end(); ++it) {
    if (it->second != key) continue;
    if (it->first <= when) return;
    delayed_.erase(it);
    break;
  }
  delayed_.emplace(when, key);
}

void WorkQueue::AddRateLimited(const std::string& key) {
  absl::Duration delay;
  {
    absl::MutexLock lock(&mutex_);
    delay = Backoff::After(options_.base_delay, options_.max_delay, failures_[key]++);
  }
  AddAfter(key, delay);
}

void WorkQueue::Forget(const std::string& key) {
  absl::MutexLock lock(&mutex_);
  failures_.erase(key);
}

int WorkQueue::Failures(const std::string& key) const {
  absl::MutexLock lock(&mutex_);
  auto it = failures_.find(key);
  return it == failures_.end() ? 0 : it->second;
}

bool WorkQueue::Get(std::string* key) {
  absl::MutexLock lock(&mutex_);
  while (true) {
    if (shut_down_) return false;
    const absl::Time now = options_.clock->Now();
    while (!delayed_.empty() && delayed_.begin()->first <= now) {
      const std::string due = delayed_.begin()->second;
      delayed_.erase(delayed_.begin());
      AddLocked(due);
    }
    if (!queue_.empty()) {
      *key = queue_.front();
      queue_.pop_front();
      dirty_.erase(*key);
      processing_.insert(*key);
      return true;
    }
    // Until a key is queued, or the earliest delayed one is due; a key
    // delayed less than that, added meanwhile, moves the wake up.
    const absl::Time wake =
        delayed_.empty() ? absl::InfiniteFuture() : delayed_.begin()->first;
    auto ready = [this, wake]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) {
      return shut_down_ || !queue_.empty() ||
             (!delayed_.empty() && delayed_.begin()->first < wake);
    };
    options_.clock->AwaitWithDeadline(mutex_, absl::Condition(&ready), wake);
  }
}

void WorkQueue::Done(const std::string& key) {
  absl::MutexLock lock(&mutex_);
  processing_.erase(key);
  if (dirty_.count(key) != 0) queue_.push_back(key);
}

void WorkQueue::ShutDown() {
  absl::MutexLock lock(&mutex_);
  shut_down_ = true;
}

size_t WorkQueue::Depth() const {
  absl::MutexLock lock(&mutex_);
  return queue_.size();
}

}  // namespace paci::op
