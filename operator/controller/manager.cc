#include "operator/controller/manager.h"

#include <glog/logging.h>

namespace paci::op {

Manager::Manager(Options options, std::function<std::unique_ptr<LeaderRunnable>()> make)
    : options_(std::move(options)), make_(std::move(make)) {}

Manager::~Manager() {
  if (starter_.joinable()) starter_.join();
}

void Manager::StartLeading() {
  std::unique_ptr<LeaderRunnable> fresh = make_();
  absl::Status started = fresh->Start();
  bool now_leading = false;
  {
    absl::MutexLock lock(&mu_);
    if (!started.ok()) {
      LOG(ERROR) << "controller: " << started;
      start_error_ = std::move(started);
      return;
    }
    if (!stopping_ && !lost_lead_) {
      runnable_ = std::move(fresh);
      now_leading = ReportLeadingLocked(true);
    }
  }
  if (fresh != nullptr) fresh->Stop();  // Run stopped, or the lead went, while it started
  if (now_leading) LeadingChanged(true);
}

bool Manager::ReportLeadingLocked(bool leading) {
  if (reported_leading_ == leading) return false;
  reported_leading_ = leading;
  return true;
}

void Manager::LostLead() {
  bool report = false;
  {
    absl::MutexLock lock(&mu_);
    lost_lead_ = true;
    report = ReportLeadingLocked(false);
  }
  if (report) LeadingChanged(false);
}

absl::Status Manager::Run(const std::function<bool(absl::Duration)>& stop_requested) {
  std::unique_ptr<LeaderElector> elector;
  if (options_.lease_client != nullptr) {
    if (absl::Status valid = LeaderElector::Validate(options_.lease); !valid.ok()) return valid;
    // The runnable starts on a thread of its own (its caches may take a while
    // to fill), so the elector goes on renewing the lease meanwhile.
    elector = std::make_unique<LeaderElector>(
        *options_.lease_client, options_.lease,
        [this] {
          absl::MutexLock lock(&mu_);
          if (!stopping_ && !starter_.joinable()) starter_ = std::thread([this] { StartLeading(); });
        },
        [this] { LostLead(); });
    elector->Start();
  } else {
    StartLeading();
  }
  bool requested = false;
  while (true) {
    bool deadline_passed = false;
    {
      absl::MutexLock lock(&mu_);
      if (lost_lead_ || start_error_) break;
      // A leader whose renew deadline passes stops here, even while its
      // renewal still waits for the API server.
      deadline_passed = elector != nullptr && runnable_ != nullptr && !elector->IsLeader();
    }
    if (deadline_passed) {
      LOG(WARNING) << "leader election: the renew deadline passed without a renewal";
      LostLead();
      break;
    }
    if (stop_requested(options_.poll_interval)) {
      requested = true;
      break;
    }
  }
  LOG(INFO) << "operator stopping";
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;  // a runnable that starts from now on is stopped at once
  }
  if (elector) elector->Stop();  // releases the lease; no callback runs after it
  if (starter_.joinable()) starter_.join();
  std::unique_ptr<LeaderRunnable> stopping;
  bool report = false;
  {
    absl::MutexLock lock(&mu_);
    stopping = std::move(runnable_);
    report = ReportLeadingLocked(false);
  }
  if (stopping) stopping->Stop();
  if (report) LeadingChanged(false);
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
