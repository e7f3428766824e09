#pragma once

// The one way paci replaces a file: readers see the old file or the new one,
// whole, never a mix, and once it returns OK the new one survives a crash.

#include <memory>
#include <ostream>
#include <string>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace paci {

// Writes `contents` to `path`, replacing any file there: into a new temporary
// file beside it ("<path>.tmp.<pid>.<n>", mode 0666 less the umask, as a
// plain open would make it), synced to disk and closed, renamed over `path`,
// then the folder synced so that the rename itself survives a crash. On any
// error the temporary file is removed and, unless only that last folder sync
// failed (the new file is in place, its rename maybe not yet on disk), the
// file at `path` is as it was, byte for byte.
// Unavailable naming `path` (and the temporary file when the rename fails)
// and the system's reason. Blocks on the disk.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents);

// The same, for contents produced piecewise or by a library that writes to a
// stream (torch::save, archive.save_to): `write` writes into `out`, which is
// the temporary file. Its error is returned as it is, after removing the
// temporary file, unless the file itself failed to take a write: then the
// system's reason, which is the cause. Exception-safe: a throw from `write`
// propagates and leaves nothing behind.
absl::Status WriteFileAtomically(const std::string& path,
                                 absl::FunctionRef<absl::Status(std::ostream& out)> write);

// Syncs the entries of `folder` to disk (fsync of the folder), so that files
// made, renamed or removed in it stay so after a crash. OK where the file
// system cannot sync a folder (EINVAL); Unavailable naming it otherwise.
absl::Status SyncFolder(const std::string& folder);

// A folder that appears whole or not at all: it is built as a new hidden
// folder beside its destination (".<name>.tmp-XXXXXX", with the mode mkdir
// would give it), removed with all it holds when the StagingFolder goes,
// unless Commit renamed it to the destination first. Not thread-safe.
class StagingFolder {
 public:
  // Unavailable naming the destination's parent and the reason.
  static absl::StatusOr<std::unique_ptr<StagingFolder>> Create(const std::string& destination);
  ~StagingFolder();
  StagingFolder(const StagingFolder&) = delete;
  StagingFolder& operator=(const StagingFolder&) = delete;

  const std::string& path() const { return path_; }

  // Renames the folder to the destination (replacing an empty folder there).
  // The folder is synced first, so that its files' names are on disk before
  // it appears, and its parent after, so that it stays. Unavailable naming
  // the folders and the reason.
  absl::Status Commit();

 private:
  StagingFolder(std::string path, std::string destination)
      : path_(std::move(path)), destination_(std::move(destination)) {}

  const std::string path_;
  const std::string destination_;
  bool committed_ = false;
};

}  // namespace paci
