#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "paci/v1/coordinator.pb.h"

struct sqlite3;
struct sqlite3_stmt;

namespace paci {

// The coordinator's jobs, durable in one SQLite file (WAL journal, synchronous=FULL, so a write
// that Put acknowledged survives kill -9 of the process). Jobs are stored as serialized v1::Job
// protos keyed by name, each with a submission sequence number that never changes.
//
// Ownership: a JobStore owns its connection and closes it on destruction. Thread-safe: one
// absl::Mutex serialises every call on the connection. Every call blocks on disk I/O; Put blocks
// until the write is synced. Another process holding the file's write lock is waited for up to a
// few seconds, then the call fails with Unavailable.
class JobStore {
 public:
  // Opens or creates the database at path and its schema. DataLoss naming the path when the file
  // is not an SQLite database or its schema is not ours (the file is then left untouched);
  // Unavailable when it cannot be opened (e.g. its directory does not exist).
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const std::string& path);

  ~JobStore();
  JobStore(const JobStore&) = delete;
  JobStore& operator=(const JobStore&) = delete;

  // Inserts the job (a new name gets the next sequence number) or replaces it (the same name keeps
  // its sequence), atomically and durably. InvalidArgument when job.name() is empty.
  absl::Status Put(const v1::Job& job);

  // The job of that name, or nullopt when there is none. DataLoss when its row does not parse.
  absl::StatusOr<std::optional<v1::Job>> Get(const std::string& name) const;

  // Every job in submission order; a row that does not parse is DataLoss naming the job.
  absl::StatusOr<std::vector<v1::Job>> List() const;

  // The submission sequence number of a stored job (for FIFO ordering); NotFound when there is none.
  absl::StatusOr<int64_t> Sequence(const std::string& name) const;

 private:
  JobStore(std::string path, sqlite3* db);
  absl::Status Prepare() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Error(int rc, absl::string_view what) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;
  mutable absl::Mutex mu_;
  sqlite3* const db_ ABSL_GUARDED_BY(mu_);
  // Prepared once in Open, reset after every use; finalized before db_ is closed.
  sqlite3_stmt* put_ ABSL_GUARDED_BY(mu_) = nullptr;
  sqlite3_stmt* get_ ABSL_GUARDED_BY(mu_) = nullptr;
  sqlite3_stmt* list_ ABSL_GUARDED_BY(mu_) = nullptr;
  sqlite3_stmt* sequence_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace paci
