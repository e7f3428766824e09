#pragma once

// Leader election with a coordination.k8s.io/v1 Lease, as client-go does it:
// the leader renews the lease every retry period; another replica takes it
// only once the lease has not been renewed for lease_duration as timed by its
// own clock (so clocks need not agree). Optimistic concurrency (409 on a
// stale resourceVersion) makes sure two replicas never both win.
//
// Owns one thread (Start/Stop). The callbacks run on it. Stop releases the
// lease when held, so a replacement does not wait out the lease.

#include <atomic>
#include <functional>
#include <string>
#include <thread>

#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "operator/kube/kube_client.h"

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
  };

  LeaderElector(KubeClient& client, Options options, std::function<void()> on_started_leading,
                std::function<void()> on_stopped_leading);
  ~LeaderElector();
  LeaderElector(const LeaderElector&) = delete;
  LeaderElector& operator=(const LeaderElector&) = delete;

  void Start();
  void Stop();
  bool IsLeader() const { return leader_.load(); }

  // One attempt to take or renew the lease; true when this replica holds it.
  bool TryAcquireOrRenew();

 private:
  void Run();
  void Release();
  std::string LeasePath() const;

  KubeClient& client_;
  const Options options_;
  const std::function<void()> on_started_leading_;
  const std::function<void()> on_stopped_leading_;

  std::atomic<bool> leader_{false};
  // What this replica last saw in the lease, and when (by its own clock).
  std::string observed_record_;
  absl::Time observed_time_ = absl::InfinitePast();
  absl::Notification stop_;
  std::thread thread_;
};

}  // namespace paci::op
