#pragma once

// Exponential backoff, the one rule of every retry loop: the delay starts at
// `initial` and doubles after each wait, up to `max`; a success resets it.
// The work queue's per-key delays (operator/controller/work_queue.h), the
// informer's relist and rewatch (kube/informer.h) and the worker agent's
// reconnects (worker/agent/worker_agent.h) all wait by it. Pure arithmetic:
// the caller waits, on its own clock or notification. Not thread-safe.

#include <algorithm>
#include <cmath>

#include "absl/time/time.h"

namespace paci {

class Backoff {
 public:
  Backoff(absl::Duration initial, absl::Duration max) : initial_(initial), max_(max) {}

  // The delay after `failures` failures in a row: initial x 2^failures, at
  // most max (the exponent is capped at 30, so it never overflows).
  static absl::Duration After(absl::Duration initial, absl::Duration max, int failures) {
    return std::min(initial * std::pow(2.0, std::clamp(failures, 0, 30)), max);
  }

  // The delay to wait now; the next one is twice it, at most max.
  absl::Duration Next() {
    const absl::Duration delay = current_;
    current_ = std::min(current_ * 2, max_);
    return delay;
  }
  // The delay Next() returns next.
  absl::Duration current() const { return current_; }
  // After a success: back to `initial`.
  void Reset() { current_ = initial_; }

 private:
  const absl::Duration initial_, max_;
  absl::Duration current_ = initial_;
};

}  // namespace paci
