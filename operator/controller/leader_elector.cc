#include "operator/controller/leader_elector.h"

#include <glog/logging.h>

#include "absl/strings/str_cat.h"
#include "kube/object.h"
#include "operator/api/training_job.h"

namespace paci::op {

using nlohmann::json;
using kube::Field;
using kube::IntField;
using kube::Rfc3339Micro;
using kube::StringField;

LeaderElector::LeaderElector(kube::KubeClient& client, Options options,
                             std::function<void()> on_started_leading,
                             std::function<void()> on_stopped_leading)
    : client_(client),
      options_(std::move(options)),
      on_started_leading_(std::move(on_started_leading)),
      on_stopped_leading_(std::move(on_stopped_leading)) {}

LeaderElector::~LeaderElector() { Stop(); }

std::string LeaderElector::LeaseCollection() const {
  return kube::CollectionPath("coordination.k8s.io", "v1", options_.lease_namespace, "leases");
}

std::string LeaderElector::LeasePath() const {
  return absl::StrCat(LeaseCollection(), "/", options_.lease_name);
}

bool LeaderElector::TryAcquireOrRenew() {
  const absl::Time now = options_.clock->Now();
  const int duration_seconds = static_cast<int>(absl::ToInt64Seconds(options_.lease_duration));
  absl::StatusOr<json> lease = client_.Get(LeasePath());
  if (absl::IsNotFound(lease.status())) {
    json fresh = {{"apiVersion", "coordination.k8s.io/v1"},
                  {"kind", "Lease"},
                  {"metadata", {{"name", options_.lease_name}, {"namespace", options_.lease_namespace}}},
                  {"spec",
                   {{"holderIdentity", options_.identity},
                    {"leaseDurationSeconds", duration_seconds},
                    {"acquireTime", Rfc3339Micro(now)},
                    {"renewTime", Rfc3339Micro(now)},
                    {"leaseTransitions", 0}}}};
    absl::StatusOr<json> created = client_.Create(LeaseCollection(), fresh);
    if (!created.ok() && !absl::IsAlreadyExists(created.status())) {
      LOG(WARNING) << "leader election: " << created.status();
    }
    return created.ok();
  }
  if (!lease.ok()) {
    LOG(WARNING) << "leader election: " << lease.status();
    return false;
  }
  json spec = Field(*lease, "spec");
  const std::string holder = StringField(spec, "holderIdentity");
  const std::string record = holder + "@" + StringField(spec, "renewTime");
  if (record != observed_record_) {
    observed_record_ = record;
    observed_time_ = now;
  }
  const int64_t held_for = IntField(spec, "leaseDurationSeconds", duration_seconds);
  if (!holder.empty() && holder != options_.identity &&
      observed_time_ + absl::Seconds(held_for) > now) {
    return false;  // someone else holds a lease that is still live
  }
  if (holder != options_.identity) {
    spec["acquireTime"] = Rfc3339Micro(now);
    spec["leaseTransitions"] = IntField(spec, "leaseTransitions", 0) + 1;
  }
  spec["holderIdentity"] = options_.identity;
  spec["leaseDurationSeconds"] = duration_seconds;
  spec["renewTime"] = Rfc3339Micro(now);
  json updated = *lease;
  updated["spec"] = spec;
  absl::StatusOr<json> written = client_.Update(LeasePath(), updated);
  if (!written.ok()) {
    if (!absl::IsAborted(written.status())) LOG(WARNING) << "leader election: " << written.status();
    return false;
  }
  observed_record_ = options_.identity + "@" + spec["renewTime"].get<std::string>();
  observed_time_ = now;
  return true;
}

void LeaderElector::Release() {
  absl::StatusOr<json> lease = client_.Get(LeasePath());
  if (!lease.ok() || StringField(Field(*lease, "spec"), "holderIdentity") != options_.identity) {
    return;
  }
  json updated = *lease;
  updated["spec"]["holderIdentity"] = "";
  updated["spec"]["leaseDurationSeconds"] = 1;
  if (absl::Status s = client_.Update(LeasePath(), updated).status(); !s.ok()) {
    LOG(WARNING) << "leader election: releasing the lease: " << s;
  }
}

bool LeaderElector::WaitToRetry(absl::Duration wait) {
  absl::MutexLock lock(&stop_mutex_);
  return !options_.clock->AwaitWithDeadline(stop_mutex_, absl::Condition(&stopping_),
                                            options_.clock->Now() + wait);
}

absl::Status LeaderElector::Validate(const Options& options) {
  if (options.retry_period <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("leader election: the retry period must be positive");
  }
  if (options.retry_period >= options.renew_deadline) {
    return absl::InvalidArgumentError(absl::StrCat(
        "leader election: the retry period (", absl::FormatDuration(options.retry_period),
        ") must be shorter than the renew deadline (", absl::FormatDuration(options.renew_deadline),
        "), or a leader steps down between two renewals"));
  }
  if (options.renew_deadline >= options.lease_duration) {
    return absl::InvalidArgumentError(absl::StrCat(
        "leader election: the renew deadline (", absl::FormatDuration(options.renew_deadline),
        ") must be shorter than the lease duration (", absl::FormatDuration(options.lease_duration),
        "), or another replica may take the lease while this one still leads"));
  }
  return absl::OkStatus();
}

bool LeaderElector::IsLeader() const {
  if (!leader_.load()) return false;
  absl::MutexLock lock(&leading_mutex_);
  return options_.clock->Now() < leading_until_;
}

void LeaderElector::Run() {
  for (absl::Duration wait = absl::ZeroDuration(); WaitToRetry(wait);
       wait = options_.retry_period) {
    // The lease's renewTime is this moment: others count its duration from
    // when they see it, so this replica counts its deadline from here.
    const absl::Time attempt = options_.clock->Now();
    const bool held = TryAcquireOrRenew();
    const absl::Time now = options_.clock->Now();
    absl::Time until;
    {
      absl::MutexLock lock(&leading_mutex_);
      if (held && now < attempt + options_.renew_deadline) {
        leading_until_ = attempt + options_.renew_deadline;
      }
      until = leading_until_;
    }
    if (now < until) {
      if (!leader_.exchange(true)) {
        LOG(INFO) << "leader election: " << options_.identity << " leads (lease "
                  << options_.lease_namespace << "/" << options_.lease_name << ")";
        if (on_started_leading_) on_started_leading_();
      }
    } else if (leader_.load()) {
      leader_ = false;
      LOG(WARNING) << "leader election: " << options_.identity << " lost the lease";
      if (on_stopped_leading_) on_stopped_leading_();
    }
  }
  if (leader_.exchange(false)) {
    Release();
    if (on_stopped_leading_) on_stopped_leading_();
  }
}

void LeaderElector::Start() { thread_ = std::thread([this] { Run(); }); }

void LeaderElector::Stop() {
  {
    absl::MutexLock lock(&stop_mutex_);
    stopping_ = true;
  }
  if (thread_.joinable()) thread_.join();
}

}  // namespace paci::op
