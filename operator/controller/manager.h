#pragma once

// The operator's manager, as controller-runtime's (pkg/manager): it owns
// leader election and runs what only the leader may run (the controller)
// while this replica leads, and says whether the replica is ready.
// operator_main.cc parses flags and wires the parts.
//
//   no election      the runnable starts at once and runs until shutdown;
//   with election    it starts when this replica wins the Lease (on a thread
//                    of its own, while the elector goes on renewing), and the
//                    manager stops when the lead is lost (IsLeader turning
//                    false at the renew deadline, or the elector giving up):
//                    the replica exits and its Deployment starts a fresh
//                    one, as controller-runtime's manager does.

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kube/kube_client.h"
#include "operator/controller/leader_elector.h"

namespace paci::op {

// What runs only while this replica leads.
class LeaderRunnable {
 public:
  virtual ~LeaderRunnable() = default;
  // Starts it (its caches synced); an error stops the manager.
  virtual absl::Status Start() = 0;
  virtual void Stop() = 0;
  // Whether it serves (readiness while leading).
  virtual bool Ready() const = 0;
};

class Manager {
 public:
  struct Options {
    // Leader election over this client and Lease; null: none (one replica).
    kube::KubeClient* lease_client = nullptr;
    LeaderElector::Options lease;
    // How often Run looks at the stop request and the lead.
    absl::Duration poll_interval = absl::Milliseconds(100);
    // Told when this replica starts (true) and stops (false) leading.
    std::function<void(bool)> leading_changed;
  };
  // `make` builds the runnable each time this replica comes to lead.
  Manager(Options options, std::function<std::unique_ptr<LeaderRunnable>()> make);
  ~Manager();
  Manager(const Manager&) = delete;
  Manager& operator=(const Manager&) = delete;

  // Runs until `stop_requested` (waits at most its argument, true once a stop
  // is asked for) says so, or the lead is lost; then stops the elector (which
  // releases the Lease) and the runnable. OK for a stop asked for; Aborted
  // when the lead was lost; the runnable's Start error (whether a stop was
  // asked for or not), or an invalid Lease's. Once.
  absl::Status Run(const std::function<bool(absl::Duration)>& stop_requested);

  // /readyz: 200 while standing by, or leading with the runnable ready; 503
  // while leading and not ready yet.
  std::pair<int, std::string> Readiness() const ABSL_LOCKS_EXCLUDED(mu_);
  // Whether the runnable runs now.
  bool Leading() const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  // Builds and starts the runnable (on its own thread with election, on
  // Run's without); publishes it unless Run is stopping or the lead went.
  void StartLeading() ABSL_LOCKS_EXCLUDED(mu_);
  // The lead is gone: Run ends.
  void LostLead() ABSL_LOCKS_EXCLUDED(mu_);
  // Whether `leading` is news to report (each change once, false only after true).
  bool ReportLeadingLocked(bool leading) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Called with mu_ released, so a callback may ask the manager anything.
  void LeadingChanged(bool leading) const {
    if (options_.leading_changed) options_.leading_changed(leading);
  }

  const Options options_;
  const std::function<std::unique_ptr<LeaderRunnable>()> make_;
  mutable absl::Mutex mu_;
  std::unique_ptr<LeaderRunnable> runnable_ ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> start_error_ ABSL_GUARDED_BY(mu_);
  bool lost_lead_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool reported_leading_ ABSL_GUARDED_BY(mu_) = false;
  std::thread starter_;  // StartLeading's under election; set under mu_, joined by Run
};

}  // namespace paci::op
