#pragma once

// Time as a component sees it: Now(), and waiting on an absl::Mutex
// condition until a deadline by that clock. Production code uses
// Clock::Real(), which is monotonic: a step of the system clock (an NTP
// correction, someone's `date -s`) moves no timeout, deadline or lease; tests give their
// component a FakeClock and move its time with Advance(), which wakes every
// waiter whose deadline has come, so no test sleeps to let time pass.

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace paci {

class Clock {
 public:
  virtual ~Clock() = default;

  // The process's clock: the system's wall time when it was first asked,
  // plus the time the monotonic clock (CLOCK_MONOTONIC) has counted since.
  // Its times are wall times to within the steps the system clock has taken
  // since; its durations never see those steps.
  static Clock& Real();

  // Real()'s kind of clock over given readings (tests step `wall`): the
  // first wall reading plus `steady`'s advance since its first reading.
  static std::unique_ptr<Clock> Steady(std::function<absl::Time()> wall,
                                       std::function<absl::Duration()> steady);

  virtual absl::Time Now() const = 0;

  // With `mutex` held: waits until `condition` holds or this clock reaches
  // `deadline`, and says whether `condition` holds. As with
  // absl::Mutex::AwaitWithDeadline, `mutex` is released while waiting and
  // held again on return.
  virtual bool AwaitWithDeadline(absl::Mutex& mutex, const absl::Condition& condition,
                                 absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex) = 0;
};

// Time that moves only when the test says so. Thread-safe.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::FromUnixSeconds(1'800'000'000)) : start_(start) {}

  absl::Time Now() const override;
  bool AwaitWithDeadline(absl::Mutex& mutex, const absl::Condition& condition,
                         absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex) override;

  // Moves time on by `duration` and wakes the waiters whose deadline it passes.
  void Advance(absl::Duration duration) ABSL_LOCKS_EXCLUDED(mutex_);
  // Blocks, in real time, until at least `count` threads wait on this clock
  // (a test advances time once the component it drives waits for it); false
  // when they do not within `timeout`.
  bool BlockUntilWaiters(int count, absl::Duration timeout = absl::Seconds(30)) const
      ABSL_LOCKS_EXCLUDED(mutex_);
  // How many waits have begun on this clock so far, and a block until as
  // many as `count` have: a test that wakes a loop waiting on the clock
  // knows its round is over once it waits again.
  int64_t waits_begun() const ABSL_LOCKS_EXCLUDED(mutex_);
  bool BlockUntilWaitsBegun(int64_t count, absl::Duration timeout = absl::Seconds(30)) const
      ABSL_LOCKS_EXCLUDED(mutex_);

 private:
  // One wait, from registering `mutex` to be woken by Advance until woken.
  void WaitOnce(absl::Mutex& mutex, const absl::Condition& condition, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mutex) ABSL_LOCKS_EXCLUDED(mutex_);

  const absl::Time start_;
  // Read without a lock: Now() is called with the components' mutexes held,
  // and Advance takes those mutexes while holding mutex_.
  std::atomic<int64_t> elapsed_ns_{0};
  mutable absl::Mutex mutex_;
  // The mutexes that waiters wait on, with how many wait on each.
  std::map<absl::Mutex*, int> waiting_ ABSL_GUARDED_BY(mutex_);
  int waiters_ ABSL_GUARDED_BY(mutex_) = 0;
  int64_t waits_begun_ ABSL_GUARDED_BY(mutex_) = 0;
};

}  // namespace paci
