#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "paci/v1/coordinator.pb.h"

namespace paci {

// The rules of ListJobs as pure functions: which jobs a query selects, what
// of each it returns, and its page tokens. The JobManager walks its indexes
// under its lock and calls these.

// ListJobs's query: filters and a page (AIP-158).
struct JobListQuery {
  v1::JobPhase phase = v1::JOB_PHASE_UNSPECIFIED;  // unspecified: every phase
  std::map<std::string, std::string> labels;       // the job carries every one
  std::string name_prefix;
  int page_size = 0;  // 0: kDefaultPageSize; above kMaxPageSize: kMaxPageSize
  std::string page_token;
  bool omit_loss_history = false;  // keep only the latest point of each history

  static constexpr int kDefaultPageSize = 100;
  static constexpr int kMaxPageSize = 1000;
  // A page also ends before its jobs exceed this many bytes, and after this
  // many jobs were looked at (a selective filter then returns a short or
  // empty page with a next_page_token, as AIP-158 allows), so one request's
  // work is bounded whatever the number of jobs held.
  static constexpr size_t kMaxPageBytes = 3 << 20;
  static constexpr int kMaxScanned = 10000;
};
struct JobPage {
  std::vector<v1::Job> jobs;
  std::string next_page_token;  // empty: the last page
};

// The page size a query asks for: the default for 0, at most kMaxPageSize;
// InvalidArgument naming page_size when negative.
absl::StatusOr<int> PageSize(const JobListQuery& query);

// Whether the job passes the query's name prefix and labels (the phase is
// the caller's index to walk).
bool Selects(const JobListQuery& query, const v1::Job& job);

// The job as a page carries it: with omit_loss_history, only the latest point
// of each loss history.
v1::Job AsListed(const JobListQuery& query, const v1::Job& job);

// Page tokens are opaque to clients: they carry the coordinator instance that
// issued them, the submission sequence to resume after, and a fingerprint of
// the query's filters, so a token from another run or for other filters is
// refused (InvalidArgument naming page_token) instead of skipping or
// repeating jobs.
std::string PageToken(uint64_t instance, int64_t after, const JobListQuery& query);
absl::StatusOr<int64_t> ResumeAfter(const JobListQuery& query, uint64_t instance);

}  // namespace paci
