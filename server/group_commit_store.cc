#include "server/group_commit_store.h"

#include <limits>
#include <utility>

namespace paci {
namespace {

constexpr int64_t kTombstone = std::numeric_limits<int64_t>::max();
constexpr size_t kMaxTombstones = 10000;

}  // namespace

absl::StatusOr<std::vector<v1::Job>> GroupCommitStore::List() const {
  absl::StatusOr<std::vector<v1::Job>> jobs = store_.List();
  if (!jobs.ok()) return jobs;
  absl::MutexLock lock(&mu_);
  for (const v1::Job& job : *jobs) written_version_[job.name()] = job.version();
  return jobs;
}

absl::Status GroupCommitStore::Apply(const std::vector<v1::Job>& puts,
                                     const std::vector<std::string>& deletes) {
  mu_.Lock();
  if (open_batch_ == nullptr) open_batch_ = std::make_shared<Batch>();
  std::shared_ptr<Batch> batch = open_batch_;
  batch->puts.insert(batch->puts.end(), puts.begin(), puts.end());
  batch->deletes.insert(batch->deletes.end(), deletes.begin(), deletes.end());
  ++batch->callers;
  // Wait until this batch is written by another caller, or this caller may write it.
  auto ready = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return batch->done || (!writing_ && open_batch_ == batch);
  };
  mu_.Await(absl::Condition(&ready));
  if (batch->done) {
    absl::Status status = batch->status;
    mu_.Unlock();
    return status;
  }
  open_batch_ = nullptr;
  writing_ = true;
  const std::vector<v1::Job> to_put = NewestUnwritten(*batch);
  mu_.Unlock();
  absl::Status status = store_.Apply(to_put, batch->deletes);
  mu_.Lock();
  if (status.ok()) Written(to_put, batch->deletes);
  batch->status = status;
  batch->done = true;
  writing_ = false;
  mu_.Unlock();
  return status;
}

int GroupCommitStore::Gathered() const {
  absl::MutexLock lock(&mu_);
  return open_batch_ == nullptr ? 0 : open_batch_->callers;
}

bool GroupCommitStore::AwaitGathered(int callers, absl::Duration timeout) const {
  absl::MutexLock lock(&mu_);
  auto gathered = [this, callers]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
    return open_batch_ != nullptr && open_batch_->callers >= callers;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&gathered), timeout);
}

std::vector<v1::Job> GroupCommitStore::NewestUnwritten(const Batch& batch) const {
  std::map<std::string, const v1::Job*> newest;
  for (const v1::Job& job : batch.puts) {
    auto written = written_version_.find(job.name());
    if (job.version() != 1 && written != written_version_.end() &&
        written->second >= job.version()) {
      continue;
    }
    const v1::Job*& slot = newest[job.name()];
    if (slot == nullptr || slot->version() < job.version()) slot = &job;
  }
  std::vector<v1::Job> to_put;
  for (const auto& [name, job] : newest) to_put.push_back(*job);
  return to_put;
}

void GroupCommitStore::Written(const std::vector<v1::Job>& puts,
                               const std::vector<std::string>& deletes) {
  for (const v1::Job& job : puts) written_version_[job.name()] = job.version();
  for (const std::string& name : deletes) {
    written_version_[name] = kTombstone;
    tombstones_.push_back(name);
  }
  while (tombstones_.size() > kMaxTombstones) {
    auto it = written_version_.find(tombstones_.front());
    if (it != written_version_.end() && it->second == kTombstone) written_version_.erase(it);
    tombstones_.pop_front();
  }
}

}  // namespace paci
