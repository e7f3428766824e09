#pragma once

// Leader election with a coordination.k8s.io/v1 Lease, as client-go does it:
// the leader renews the lease every retry period; another replica takes it
// only once the lease has not been renewed for lease_duration as timed by its
// own clock (so clocks need not agree). Optimistic concurrency (409 on a
// stale resourceVersion) makes sure two replicas never both win.
//
// A leader stops leading renew_deadline after its last renewal began, before
// lease_duration lets another replica take the lease: IsLeader() turns false
// at that moment by itself, even while a renewal is still waiting for the
// server (the operator's main loop watches it), and on_stopped_leading runs
// once the next attempt is over. A renewal that comes back after that moment
// does not count.
//
// Owns one thread (Start/Stop). The callbacks run on it. Stop releases the
// lease when held, so a replacement does not wait out the lease. Time is
// Options::clock's (the process's monotonic clock; a FakeClock in tests).

#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "kube/kube_client.h"

namespace paci::op {

class LeaderElector {
 public:
  struct Options {
    std::string lease_namespace = "default";
    std::string lease_name = "paci-operator";
    std::string identity;  // unique per replica, e.g. the pod name
    absl::Duration lease_duration = absl::Seconds(15);
    absl::Duration renew_deadline = absl::Seconds(10);  // a leader that cannot renew this long steps down
    absl::Duration retry_period = absl::Seconds(2);
    Clock* clock = &Clock::Real();
  };

  // InvalidArgument unless 0 < retry_period < renew_deadline < lease_duration
  // (naming the two that are out of order).
  static absl::Status Validate(const Options& options);

  LeaderElector(kube::KubeClient& client, Options options, std::function<void()> on_started_leading,
                std::function<void()> on_stopped_leading);
  ~LeaderElector();
  LeaderElector(const LeaderElector&) = delete;
  LeaderElector& operator=(const LeaderElector&) = delete;

  void Start();
  void Stop();
  // Whether this replica holds the lease now: it won it, and its last
  // renewal began less than renew_deadline ago.
  bool IsLeader() const;

  // One attempt to take or renew the lease; true when this replica holds it.
  bool TryAcquireOrRenew();

 private:
  void Run();
  // Waits `wait` (none: only looks); false once Stop has been called.
  bool WaitToRetry(absl::Duration wait);
  void Release();
  std::string LeaseCollection() const;
  std::string LeasePath() const;

  kube::KubeClient& client_;
  const Options options_;
  const std::function<void()> on_started_leading_;
  const std::function<void()> on_stopped_leading_;

  std::atomic<bool> leader_{false};
  mutable absl::Mutex leading_mutex_;
  absl::Time leading_until_ ABSL_GUARDED_BY(leading_mutex_) = absl::InfinitePast();
  // What this replica last saw in the lease, and when (by its own clock).
  std::string observed_record_;
  absl::Time observed_time_ = absl::InfinitePast();
  absl::Mutex stop_mutex_;
  bool stopping_ ABSL_GUARDED_BY(stop_mutex_) = false;
  std::thread thread_;
};

}  // namespace paci::op
