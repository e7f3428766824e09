#include "operator/controller/manager.h"

#include <glog/logging.h>

#include "absl/strings/str_cat.h"

namespace paci::op {

Manager::Manager(Options options, std::function<std::unique_ptr<LeaderRunnable>()> make)
    : options_(std::move(options)), make_(std::move(make)) {}

void Manager::StartLeading() {
  std::unique_ptr<LeaderRunnable> fresh = make_();
  absl::Status started = fresh->Start();
  absl::MutexLock lock(&mu_);
  if (!started.ok()) {
    LOG(ERROR) << "controller: " << started;
    start_error_ = std::move(started);
    return;
  }
  runnable_ = std::move(fresh);
  LeadingChanged(true);
}

absl::Status Manager::Run(const std::function<bool(absl::Duration)>& stop_requested) {
  std::unique_ptr<LeaderElector> elector;
  if (options_.lease_client != nullptr) {
    if (absl::Status valid = LeaderElector::Validate(options_.lease); !valid.ok()) return valid;
    elector = std::make_unique<LeaderElector>(
        *options_.lease_client, options_.lease, [this] { StartLeading(); },
        [this] {
          LeadingChanged(false);
          absl::MutexLock lock(&mu_);
          lost_lead_ = true;
        });
    elector->Start();
  } else {
    StartLeading();
  }
  bool requested = false;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      if (lost_lead_ || start_error_) break;
      // A leader whose renew deadline passes stops here, even while its
      // renewal still waits for the API server.
      if (elector != nullptr && runnable_ != nullptr && !elector->IsLeader()) {
        LOG(WARNING) << "leader election: the renew deadline passed without a renewal";
        LeadingChanged(false);
        lost_lead_ = true;
        break;
      }
    }
    if (stop_requested(options_.poll_interval)) {
      requested = true;
      break;
    }
  }
  LOG(INFO) << "operator stopping";
  std::unique_ptr<LeaderRunnable> stopping;
  {
    absl::MutexLock lock(&mu_);
    stopping = std::move(runnable_);
  }
  if (stopping) stopping->Stop();
  if (elector) elector->Stop();  // releases the lease
  absl::MutexLock lock(&mu_);
  if (start_error_) return *start_error_;
  if (lost_lead_ && !requested) {
    return absl::AbortedError("lost the leader lease; exiting so a fresh replica can take over");
  }
  return absl::OkStatus();
}

std::pair<int, std::string> Manager::Readiness() const {
  absl::MutexLock lock(&mu_);
  if (runnable_ != nullptr && !runnable_->Ready()) return {503, "caches not synced"};
  return {200, runnable_ != nullptr ? "ok: leading" : "ok: standby"};
}

bool Manager::Leading() const {
  absl::MutexLock lock(&mu_);
  return runnable_ != nullptr;
}

}  // namespace paci::op
