#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "paci/v1/coordinator.pb.h"

namespace paci {

// Where the coordinator's jobs are kept, durably: serialized v1::Job protos
// keyed by name, each with a submission sequence number that never changes.
// The JobManager depends only on this interface, so its tests can put a store
// in front of it that fails or blocks on demand.
//
// Every call may block on disk I/O; Put returns once the write is durable.
// Implementations are thread-safe.
class JobStore {
 public:
  // The SQLite store: one file (WAL journal, synchronous=FULL, so a write that
  // Put acknowledged survives kill -9 of the process), one connection owned by
  // the store and closed on destruction, every call serialised on one mutex.
  // Another process holding the file's write lock is waited for up to a few
  // seconds, then the call fails with Unavailable.
  //
  // Opens or creates the database at path and its schema. DataLoss naming the
  // path when the file is not an SQLite database or its schema is not ours
  // (the file is then left untouched); Unavailable when it cannot be opened
  // (e.g. its directory does not exist).
  static absl::StatusOr<std::unique_ptr<JobStore>> Open(const std::string& path);

  virtual ~JobStore() = default;

  // Inserts the job (a new name gets the next sequence number) or replaces it
  // (the same name keeps its sequence), atomically and durably.
  // InvalidArgument when job.name() is empty.
  virtual absl::Status Put(const v1::Job& job) = 0;

  // The job of that name, or nullopt when there is none. DataLoss when its
  // row does not parse.
  virtual absl::StatusOr<std::optional<v1::Job>> Get(const std::string& name) const = 0;

  // Every job in submission order; a row that does not parse is DataLoss
  // naming the job.
  virtual absl::StatusOr<std::vector<v1::Job>> List() const = 0;

  // The submission sequence number of a stored job (for FIFO ordering);
  // NotFound when there is none.
  virtual absl::StatusOr<int64_t> Sequence(const std::string& name) const = 0;

  // Removes the job of that name, durably; OK when there is none.
  virtual absl::Status Delete(const std::string& name) = 0;

  // Writes every job of `puts` (as Put), then removes every job named in
  // `deletes`. The SQLite store does it in one transaction, synced once, so a
  // batch of writes costs one disk sync (group commit) and lands whole or not
  // at all. This default calls Put and Delete in turn (not atomically).
  virtual absl::Status Apply(const std::vector<v1::Job>& puts,
                             const std::vector<std::string>& deletes);
};

}  // namespace paci
