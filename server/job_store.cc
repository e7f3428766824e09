#include "server/job_store.h"

#include <sqlite3.h>

#include <glog/logging.h>

#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace paci {
namespace {

// Marks a database as ours: PRAGMA application_id ("paci") and PRAGMA user_version.
constexpr int64_t kApplicationId = 0x70616369;
constexpr int64_t kSchemaVersion = 1;
constexpr int kBusyTimeoutMs = 5000;

constexpr char kCreateSchema[] =
    "CREATE TABLE jobs ("
    "  sequence INTEGER PRIMARY KEY AUTOINCREMENT,"
    "  name TEXT NOT NULL UNIQUE,"
    "  job BLOB NOT NULL);"
    "PRAGMA application_id = 1885430633;"
    "PRAGMA user_version = 1;";
static_assert(kApplicationId == 1885430633 && kSchemaVersion == 1, "kCreateSchema is stale");

absl::Status SqliteStatus(sqlite3* db, int rc, absl::string_view what, const std::string& path) {
  std::string message = absl::StrCat(what, " in job store ", path, ": ",
                                     db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc));
  switch (rc & 0xff) {
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
      return absl::DataLossError(message);
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_IOERR:
    case SQLITE_FULL:
    case SQLITE_CANTOPEN:
    case SQLITE_PROTOCOL:
      return absl::UnavailableError(message);
    case SQLITE_READONLY:
    case SQLITE_PERM:
    case SQLITE_AUTH:
      return absl::PermissionDeniedError(message);
    default:
      return absl::InternalError(message);
  }
}

// Runs SQL that takes no parameters and returns no rows (pragmas, schema, transactions).
absl::Status Exec(sqlite3* db, const char* sql, const std::string& path) {
  int rc = sqlite3_exec(db, sql, nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return SqliteStatus(db, rc, absl::StrCat("'", sql, "' failed"), path);
  return absl::OkStatus();
}

// Runs a parameterless query that returns one row and returns its first column as text.
absl::StatusOr<std::string> QueryOne(sqlite3* db, const char* sql, const std::string& path) {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db, sql, -1, &stmt, nullptr);
  if (rc == SQLITE_OK) rc = sqlite3_step(stmt);
  std::string value;
  if (rc == SQLITE_ROW) {
    const unsigned char* text = sqlite3_column_text(stmt, 0);
    value.assign(reinterpret_cast<const char*>(text), sqlite3_column_bytes(stmt, 0));
  }
  absl::Status status = rc == SQLITE_ROW
                            ? absl::OkStatus()
                            : SqliteStatus(db, rc, absl::StrCat("'", sql, "' failed"), path);
  sqlite3_finalize(stmt);  // Repeats the step's error, already reported above.
  RETURN_IF_ERROR(status);
  return value;
}

enum class Contents { kEmpty, kOurs };

// Whether the database is empty (ours to initialise) or already ours; DataLoss otherwise.
absl::StatusOr<Contents> Inspect(sqlite3* db, const std::string& path) {
  ASSIGN_OR_RETURN(std::string application_id, QueryOne(db, "PRAGMA application_id", path));
  ASSIGN_OR_RETURN(std::string version, QueryOne(db, "PRAGMA user_version", path));
  ASSIGN_OR_RETURN(std::string tables, QueryOne(db, "SELECT count(*) FROM sqlite_master", path));
  if (application_id == "0" && version == "0" && tables == "0") return Contents::kEmpty;
  if (application_id != absl::StrCat(kApplicationId)) {
    return absl::DataLossError(absl::StrCat("job store ", path, " is an SQLite database of another "
                                            "application (application_id ", application_id, ")"));
  }
  if (version != absl::StrCat(kSchemaVersion)) {
    return absl::DataLossError(absl::StrCat("job store ", path, " has schema version ", version,
                                            "; this build reads version ", kSchemaVersion));
  }
  return Contents::kOurs;
}

// Resets a cached statement and drops its bindings when the call that used it returns.
class StatementReset {
 public:
  explicit StatementReset(sqlite3_stmt* stmt) : stmt_(stmt) {}
  ~StatementReset() {
    sqlite3_reset(stmt_);  // Returns the last step's error, which the caller has already reported.
    sqlite3_clear_bindings(stmt_);  // Always SQLITE_OK.
  }
  StatementReset(const StatementReset&) = delete;
  StatementReset& operator=(const StatementReset&) = delete;

 private:
  sqlite3_stmt* const stmt_;
};

int BindText(sqlite3_stmt* stmt, int index, const std::string& text) {
  return sqlite3_bind_text(stmt, index, text.data(), static_cast<int>(text.size()), SQLITE_STATIC);
}

std::string ColumnText(sqlite3_stmt* stmt, int column) {
  const unsigned char* text = sqlite3_column_text(stmt, column);
  return std::string(reinterpret_cast<const char*>(text), sqlite3_column_bytes(stmt, column));
}

absl::StatusOr<v1::Job> ColumnJob(sqlite3_stmt* stmt, int column, const std::string& name,
                                  const std::string& path) {
  const void* blob = sqlite3_column_blob(stmt, column);
  int size = sqlite3_column_bytes(stmt, column);
  v1::Job job;
  if (!job.ParseFromArray(blob, size)) {
    return absl::DataLossError(absl::StrCat("job store ", path, ": the stored job '", name,
                                            "' does not parse (", size, " bytes)"));
  }
  return job;
}

}  // namespace

absl::StatusOr<std::unique_ptr<SqliteJobStore>> SqliteJobStore::Open(const std::string& path) {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(path.c_str(), &db,
                           SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    absl::Status status = absl::UnavailableError(absl::StrCat(
        "cannot open job store ", path, ": ", db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc)));
    sqlite3_close(db);  // Frees the handle sqlite3_open_v2 returns even on failure; nothing to report.
    return status;
  }
  std::unique_ptr<SqliteJobStore> store(new SqliteJobStore(path, db));  // Owns db from here on.
  absl::MutexLock lock(&store->mu_);
  rc = sqlite3_busy_timeout(db, kBusyTimeoutMs);
  if (rc != SQLITE_OK) return SqliteStatus(db, rc, "setting busy_timeout failed", path);
  // Read-only checks first, so a file that is not ours is never written to.
  ASSIGN_OR_RETURN(Contents contents, Inspect(db, path));
  ASSIGN_OR_RETURN(std::string journal_mode, QueryOne(db, "PRAGMA journal_mode = WAL", path));
  if (journal_mode != "wal") {
    return absl::UnavailableError(absl::StrCat("job store ", path, " cannot use a WAL journal (",
                                               journal_mode, ")"));
  }
  RETURN_IF_ERROR(Exec(db, "PRAGMA synchronous = FULL", path));
  if (contents == Contents::kEmpty) {
    // Another process may be creating the schema too: decide again under the write lock.
    RETURN_IF_ERROR(Exec(db, "BEGIN IMMEDIATE", path));
    absl::StatusOr<Contents> now = Inspect(db, path);
    absl::Status status = now.status();
    if (status.ok() && *now == Contents::kEmpty) status = Exec(db, kCreateSchema, path);
    if (status.ok()) status = Exec(db, "COMMIT", path);
    // On failure, undo; ROLLBACK fails only when there is nothing left to roll back.
    if (!status.ok()) sqlite3_exec(db, "ROLLBACK", nullptr, nullptr, nullptr);
    RETURN_IF_ERROR(status);
  }
  RETURN_IF_ERROR(store->Prepare());
  return store;
}

SqliteJobStore::SqliteJobStore(std::string path, sqlite3* db) : path_(std::move(path)), db_(db) {}

SqliteJobStore::~SqliteJobStore() {
  for (sqlite3_stmt* stmt : {put_, get_, list_, sequence_, delete_}) sqlite3_finalize(stmt);
  // With every statement finalized close cannot be busy; an I/O error here has no one to tell,
  // and every acknowledged write is already synced.
  sqlite3_close_v2(db_);
}

absl::Status SqliteJobStore::Prepare() {
  const std::pair<sqlite3_stmt**, const char*> statements[] = {
      {&put_, "INSERT INTO jobs (name, job) VALUES (?1, ?2) "
              "ON CONFLICT (name) DO UPDATE SET job = excluded.job"},
      {&get_, "SELECT job FROM jobs WHERE name = ?1"},
      {&list_, "SELECT name, job FROM jobs ORDER BY sequence"},
      {&sequence_, "SELECT sequence FROM jobs WHERE name = ?1"},
      {&delete_, "DELETE FROM jobs WHERE name = ?1"},
  };
  for (const auto& [stmt, sql] : statements) {
    int rc = sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, stmt, nullptr);
    if (rc == SQLITE_ERROR) {  // No such table or column: someone else's tables under our id.
      return absl::DataLossError(absl::StrCat("job store ", path_, " has a schema that is not ours: ",
                                              sqlite3_errmsg(db_)));
    }
    if (rc != SQLITE_OK) return Error(rc, "preparing a statement failed");
  }
  return absl::OkStatus();
}

absl::Status SqliteJobStore::Error(int rc, absl::string_view what) const {
  return SqliteStatus(db_, rc, what, path_);
}

absl::Status SqliteJobStore::PutLocked(const v1::Job& job, const std::string& serialized) {
  StatementReset reset(put_);
  int rc = BindText(put_, 1, job.name());
  if (rc == SQLITE_OK) {
    rc = sqlite3_bind_blob(put_, 2, serialized.data(), static_cast<int>(serialized.size()),
                           SQLITE_STATIC);
  }
  if (rc != SQLITE_OK) return Error(rc, "binding the job failed");
  rc = sqlite3_step(put_);
  if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("storing job '", job.name(), "' failed"));
  return absl::OkStatus();
}

absl::Status SqliteJobStore::DeleteLocked(const std::string& name) {
  StatementReset reset(delete_);
  int rc = BindText(delete_, 1, name);
  if (rc != SQLITE_OK) return Error(rc, "binding the job name failed");
  rc = sqlite3_step(delete_);
  if (rc != SQLITE_DONE) return Error(rc, absl::StrCat("removing job '", name, "' failed"));
  return absl::OkStatus();
}

absl::Status SqliteJobStore::Apply(const std::vector<v1::Job>& puts,
                                   const std::vector<std::string>& deletes) {
  std::vector<std::string> serialized(puts.size());
  for (size_t i = 0; i < puts.size(); ++i) {
    if (puts[i].name().empty()) return absl::InvalidArgumentError("job.name is empty");
    if (!puts[i].SerializeToString(&serialized[i])) {
      return absl::InvalidArgumentError(absl::StrCat("job '", puts[i].name(), "' does not serialize"));
    }
  }
  absl::MutexLock lock(&mu_);
  int rc = sqlite3_exec(db_, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) return Error(rc, "starting a transaction failed");
  absl::Status status;
  for (size_t i = 0; i < puts.size() && status.ok(); ++i) status = PutLocked(puts[i], serialized[i]);
  for (size_t i = 0; i < deletes.size() && status.ok(); ++i) status = DeleteLocked(deletes[i]);
  if (status.ok()) {
    rc = sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr);  // the one sync
    if (rc != SQLITE_OK) status = Error(rc, "committing a transaction failed");
  }
  // On failure, undo; ROLLBACK fails only when there is nothing left to roll back.
  if (!status.ok()) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  return status;
}

absl::StatusOr<std::optional<v1::Job>> SqliteJobStore::Get(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  StatementReset reset(get_);
  int rc = BindText(get_, 1, name);
  if (rc != SQLITE_OK) return Error(rc, "binding the job name failed");
  rc = sqlite3_step(get_);
  if (rc == SQLITE_DONE) return std::nullopt;
  if (rc != SQLITE_ROW) return Error(rc, absl::StrCat("reading job '", name, "' failed"));
  ASSIGN_OR_RETURN(v1::Job job, ColumnJob(get_, 0, name, path_));
  return job;
}

absl::StatusOr<std::vector<v1::Job>> SqliteJobStore::List() const {
  absl::MutexLock lock(&mu_);
  StatementReset reset(list_);
  std::vector<v1::Job> jobs;
  int rc;
  while ((rc = sqlite3_step(list_)) == SQLITE_ROW) {
    absl::StatusOr<v1::Job> job = ColumnJob(list_, 1, ColumnText(list_, 0), path_);
    if (!job.ok()) {
      LOG(ERROR) << job.status().message()
                 << ": left out and kept in the store (a job submitted under its name replaces it)";
      continue;
    }
    jobs.push_back(*std::move(job));
  }
  if (rc != SQLITE_DONE) return Error(rc, "listing jobs failed");
  return jobs;
}

absl::StatusOr<int64_t> SqliteJobStore::Sequence(const std::string& name) const {
  absl::MutexLock lock(&mu_);
  StatementReset reset(sequence_);
  int rc = BindText(sequence_, 1, name);
  if (rc != SQLITE_OK) return Error(rc, "binding the job name failed");
  rc = sqlite3_step(sequence_);
  if (rc == SQLITE_DONE) return absl::NotFoundError(absl::StrCat("no job named '", name, "'"));
  if (rc != SQLITE_ROW) return Error(rc, absl::StrCat("reading job '", name, "' failed"));
  return sqlite3_column_int64(sequence_, 0);
}

}  // namespace paci
