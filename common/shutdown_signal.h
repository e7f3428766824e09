#pragma once

#include <signal.h>

#include <atomic>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

namespace paci {

// SIGINT and SIGTERM as a request to shut down, the one way every binary
// takes them: the signals are blocked in the thread that constructs it, and
// so in every thread started after (they inherit its mask), and a thread of
// its own waits for them (sigwait) and notifies. What to do about it is
// ordinary code on ordinary threads: a main waits on it, polls it between
// ticks, or passes it on.
//
// Construct it at the top of main(), before any other thread starts (a
// thread started earlier would still take the signals' default action: die).
// One at a time per process. The signals stay blocked after it is destroyed:
// a late one is left pending rather than killing a process that is already
// shutting down. Thread-safe.
class ShutdownSignal {
 public:
  ShutdownSignal();
  // Stops and joins the waiting thread.
  ~ShutdownSignal();
  ShutdownSignal(const ShutdownSignal&) = delete;
  ShutdownSignal& operator=(const ShutdownSignal&) = delete;

  // SIGINT or SIGTERM came, or Request() was called.
  bool requested() const { return requested_.HasBeenNotified(); }
  // Waits up to `timeout` for the request; returns requested().
  bool WaitFor(absl::Duration timeout) const {
    return requested_.WaitForNotificationWithTimeout(timeout);
  }
  void Wait() const { requested_.WaitForNotification(); }
  // Requests the shutdown as a signal would (idempotent).
  void Request();
  // The signal that requested the shutdown; 0 before one came or after Request().
  int signal_number() const { return signal_number_.load(); }
  // Waits up to `timeout` until `count` signals have been taken in all (a
  // later one is absorbed: it changes nothing); returns whether they were.
  bool AwaitSignalsTaken(int count, absl::Duration timeout);

 private:
  void WaitForSignals();

  sigset_t signals_;
  absl::Mutex mu_;  // one Notify, and the count of signals taken
  int signals_taken_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Notification requested_;
  std::atomic<int> signal_number_{0};
  std::atomic<bool> closing_{false};
  std::thread waiter_;
};

}  // namespace paci
