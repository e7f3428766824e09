#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "paci/v1/coordinator.pb.h"
#include "server/job_store.h"

namespace paci {

// A JobStore in front of another that writes concurrent Applies together and
// never writes a job's older version over a newer one:
//   - group commit: while one caller's batch is being written, the calls that
//     arrive are gathered into the next batch, which the first of them writes
//     in one transaction of the store below while the others wait for its
//     outcome; every caller gets the status of the batch its jobs were in;
//   - versions: of the jobs in a batch only each name's newest version is
//     written, and only when it is newer than what was last written of that
//     name (what List returned counts as written). A removed job's older
//     versions (a write still on its way) are never written again; a job at
//     version 1 is a new submission and replaces what was removed before it.
// Thread-safe. Its own mutex is never held while the store below is called.
class GroupCommitStore final : public JobStore {
 public:
  explicit GroupCommitStore(JobStore& store) : store_(store) {}

  absl::StatusOr<std::vector<v1::Job>> List() const override ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Apply(const std::vector<v1::Job>& puts, const std::vector<std::string>& deletes)
      override ABSL_LOCKS_EXCLUDED(mu_);

  // The callers whose writes the batch being gathered holds (0 when none is):
  // they wait for the write under way, then for theirs.
  int Gathered() const ABSL_LOCKS_EXCLUDED(mu_);
  // Waits, at most `timeout`, until the batch being gathered holds `callers`;
  // whether it does.
  bool AwaitGathered(int callers, absl::Duration timeout) const ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Batch {
    std::vector<v1::Job> puts;
    std::vector<std::string> deletes;
    int callers = 0;
    absl::Status status;
    bool done = false;
  };
  // The jobs of the batch to hand to the store below.
  std::vector<v1::Job> NewestUnwritten(const Batch& batch) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Written(const std::vector<v1::Job>& puts, const std::vector<std::string>& deletes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  JobStore& store_;
  mutable absl::Mutex mu_;
  // The batch being gathered, and whether a caller is writing one.
  std::shared_ptr<Batch> open_batch_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  // The version last written of each job; removed jobs' names, oldest first,
  // the newest of which are kept as tombstones so their number is bounded.
  mutable std::map<std::string, int64_t> written_version_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> tombstones_ ABSL_GUARDED_BY(mu_);
};

}  // namespace paci
