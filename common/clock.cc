#include "common/clock.h"

#include <algorithm>
#include <chrono>
#include <utility>

namespace paci {
namespace {

class SteadyClock final : public Clock {
 public:
  SteadyClock(std::function<absl::Time()> wall, std::function<absl::Duration()> steady)
      : steady_(std::move(steady)), start_(steady_()), wall_start_(wall()) {}

  absl::Time Now() const override { return wall_start_ + (steady_() - start_); }

  // absl::Mutex times its waits by the system clock: each wait is at most a
  // second long and the deadline is checked against this clock between
  // them, so a step of the system clock delays a wake by at most that.
  bool AwaitWithDeadline(absl::Mutex& mutex, const absl::Condition& condition,
                         absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex) override {
    while (true) {
      if (condition.Eval()) return true;
      const absl::Duration left = deadline - Now();
      if (left <= absl::ZeroDuration()) return false;
      if (mutex.AwaitWithTimeout(condition, std::min(left, absl::Seconds(1)))) return true;
    }
  }

 private:
  const std::function<absl::Duration()> steady_;
  const absl::Duration start_;
  const absl::Time wall_start_;
};

absl::Duration MonotonicNow() {
  return absl::FromChrono(std::chrono::steady_clock::now().time_since_epoch());
}

}  // namespace

std::unique_ptr<Clock> Clock::Steady(std::function<absl::Time()> wall,
                                     std::function<absl::Duration()> steady) {
  return std::make_unique<SteadyClock>(std::move(wall), std::move(steady));
}

Clock& Clock::Real() {
  static Clock* const clock = Steady([] { return absl::Now(); }, MonotonicNow).release();
  return *clock;
}

absl::Time FakeClock::Now() const {
  return start_ + absl::Nanoseconds(elapsed_ns_.load(std::memory_order_acquire));
}

bool FakeClock::AwaitWithDeadline(absl::Mutex& mutex, const absl::Condition& condition,
                                  absl::Time deadline) {
  while (true) {
    if (condition.Eval()) return true;
    if (Now() >= deadline) return false;
    WaitOnce(mutex, condition, deadline);
  }
}

// Advance wakes a waiter by taking and releasing its mutex, which makes
// absl::Mutex evaluate the waiter's condition (and so read the new time).
// Advance does that holding mutex_, so a waiter takes mutex_ only with its
// own mutex released: the two are never taken in the other order.
void FakeClock::WaitOnce(absl::Mutex& mutex, const absl::Condition& condition,
                         absl::Time deadline) {
  mutex.Unlock();
  {
    absl::MutexLock lock(&mutex_);
    ++waiting_[&mutex];
    ++waiters_;
    ++waits_begun_;
  }
  mutex.Lock();
  auto woken = [&] { return condition.Eval() || Now() >= deadline; };
  mutex.Await(absl::Condition(&woken));
  mutex.Unlock();
  {
    absl::MutexLock lock(&mutex_);
    if (--waiting_[&mutex] == 0) waiting_.erase(&mutex);
    --waiters_;
  }
  mutex.Lock();
}

void FakeClock::Advance(absl::Duration duration) {
  absl::MutexLock lock(&mutex_);
  elapsed_ns_.fetch_add(absl::ToInt64Nanoseconds(duration), std::memory_order_acq_rel);
  for (const auto& [waited_on, count] : waiting_) {
    waited_on->Lock();
    waited_on->Unlock();
  }
}

bool FakeClock::BlockUntilWaiters(int count, absl::Duration timeout) const {
  auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return waiters_ >= count; };
  absl::MutexLock lock(&mutex_);
  return mutex_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

int64_t FakeClock::waits_begun() const {
  absl::MutexLock lock(&mutex_);
  return waits_begun_;
}

bool FakeClock::BlockUntilWaitsBegun(int64_t count, absl::Duration timeout) const {
  auto enough = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex_) { return waits_begun_ >= count; };
  absl::MutexLock lock(&mutex_);
  return mutex_.AwaitWithTimeout(absl::Condition(&enough), timeout);
}

}  // namespace paci
