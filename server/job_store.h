#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "paci/v1/coordinator.pb.h"

struct sqlite3;
struct sqlite3_stmt;

namespace paci {

// Where the coordinator's jobs are kept, durably: serialized v1::Job protos
// keyed by name, in submission order. The JobManager depends only on this
// interface (what it calls: List at recovery, Apply for every write), so its
// tests can put a store in front of it that fails or blocks on demand, and
// GroupCommitStore can gather concurrent writes in front of it.
//
// Every call may block on disk I/O. Implementations are thread-safe.
class JobStore {
 public:
  virtual ~JobStore() = default;

  // Every job in submission order. A row that does not parse is left out
  // (logged as an error naming the job) and kept as it is: one damaged row
  // does not keep the others from being read, and a job submitted under its
  // name replaces it.
  virtual absl::StatusOr<std::vector<v1::Job>> List() const = 0;

  // Writes every job of `puts` (a new name is appended to the submission
  // order, a known one replaced in place), then removes every job named in
  // `deletes` (a name not stored is no error), atomically and durably: it
  // lands whole or not at all, and returns once it is durable.
  // InvalidArgument, writing nothing, when a job's name is empty.
  virtual absl::Status Apply(const std::vector<v1::Job>& puts,
                             const std::vector<std::string>& deletes) = 0;
};

// The SQLite store: one file (WAL journal, synchronous=FULL, so a write that
// Apply acknowledged survives kill -9 of the process), one connection owned by
// the store and closed on destruction, every call serialised on one mutex,
// each Apply one transaction synced once. Another process holding the file's
// write lock is waited for up to a few seconds, then the call fails with
// Unavailable.
class SqliteJobStore final : public JobStore {
 public:
  // Opens or creates the database at path and its schema. DataLoss naming the
  // path when the file is not an SQLite database or its schema is not ours
  // (the file is then left untouched); Unavailable when it cannot be opened
  // (e.g. its directory does not exist).
  static absl::StatusOr<std::unique_ptr<SqliteJobStore>> Open(const std::string& path);

  ~SqliteJobStore() override;
  SqliteJobStore(const SqliteJobStore&) = delete;
  SqliteJobStore& operator=(const SqliteJobStore&) = delete;

  absl::StatusOr<std::vector<v1::Job>> List() const override;
  absl::Status Apply(const std::vector<v1::Job>& puts,
                     const std::vector<std::string>& deletes) override;

  // Reads of one row, to inspect a store: the job of that name (nullopt when
  // there is none; DataLoss when it does not parse), and its submission
  // sequence number, which a replacement keeps (NotFound when there is none).
  absl::StatusOr<std::optional<v1::Job>> Get(const std::string& name) const;
  absl::StatusOr<int64_t> Sequence(const std::string& name) const;

 private:
  SqliteJobStore(std::string path, sqlite3* db);
  absl::Status Prepare() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status Error(int rc, absl::string_view what) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status PutLocked(const v1::Job& job, const std::string& serialized)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status DeleteLocked(const std::string& name) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const std::string path_;
  mutable absl::Mutex mu_;
  sqlite3* const db_ ABSL_GUARDED_BY(mu_);
  // Prepared once in Open, reset after every use; finalized before db_ is closed.
  sqlite3_stmt* put_ ABSL_GUARDED_BY(mu_) = nullptr;
  sqlite3_stmt* get_ ABSL_GUARDED_BY(mu_) = nullptr;
  sqlite3_stmt* list_ ABSL_GUARDED_BY(mu_) = nullptr;
  sqlite3_stmt* sequence_ ABSL_GUARDED_BY(mu_) = nullptr;
  sqlite3_stmt* delete_ ABSL_GUARDED_BY(mu_) = nullptr;
};

}  // namespace paci
