#include "server/job_store.h"

#include <signal.h>
#include <sqlite3.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/temp_dir.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace paci {
namespace {

using ::testing::HasSubstr;

// A fresh database path per test, in a folder of this process's that goes
// with it (the writer the SIGKILL test forks ends by _exit or the signal, so
// only this process removes it).
std::string TempPath(const std::string& name) {
  static const TempDir dir("job-store-test");
  const testing::TestInfo* info = testing::UnitTest::GetInstance()->current_test_info();
  return absl::StrCat(dir.path(), "/", info->name(), "_", name);
}

v1::Job MakeJob(const std::string& name, v1::JobPhase phase = v1::QUEUED, int64_t version = 1) {
  v1::Job job;
  job.set_name(name);
  job.mutable_spec()->set_name(name);
  job.mutable_spec()->mutable_pipeline()->set_num_stages(4);
  job.mutable_spec()->mutable_run_policy()->set_priority(7);
  (*job.mutable_spec()->mutable_run_policy()->mutable_worker_selector())["gpu"] = "h100";
  job.mutable_status()->set_phase(phase);
  job.set_version(version);
  return job;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

bool Exists(const std::string& path) { return access(path.c_str(), F_OK) == 0; }

// Runs SQL on the file directly, as another program would.
void ExecRaw(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* error = nullptr;
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error);
  EXPECT_EQ(rc, SQLITE_OK) << (error ? error : "");
  sqlite3_free(error);
  ASSERT_EQ(sqlite3_close(db), SQLITE_OK);
}

std::unique_ptr<SqliteJobStore> OpenOrDie(const std::string& path) {
  absl::StatusOr<std::unique_ptr<SqliteJobStore>> store = SqliteJobStore::Open(path);
  EXPECT_TRUE(store.ok()) << store.status();
  return store.ok() ? std::move(*store) : nullptr;
}

// One job written in its own transaction.
absl::Status Put(JobStore& store, const v1::Job& job) { return store.Apply({job}, {}); }

std::vector<std::string> Names(const std::vector<v1::Job>& jobs) {
  std::vector<std::string> names;
  for (const v1::Job& job : jobs) names.push_back(job.name());
  return names;
}

TEST(JobStoreTest, PutGetListRoundTripInSubmissionOrder) {
  std::unique_ptr<SqliteJobStore> store = OpenOrDie(TempPath("db"));
  ASSERT_NE(store, nullptr);
  for (const char* name : {"charlie", "alpha", "bravo"}) {
    ASSERT_TRUE(Put(*store, MakeJob(name)).ok());
  }

  absl::StatusOr<std::optional<v1::Job>> got = store->Get("alpha");
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->SerializeAsString(), MakeJob("alpha").SerializeAsString());

  absl::StatusOr<std::vector<v1::Job>> jobs = store->List();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(Names(*jobs), (std::vector<std::string>{"charlie", "alpha", "bravo"}));
  EXPECT_EQ((*jobs)[2].SerializeAsString(), MakeJob("bravo").SerializeAsString());

  EXPECT_LT(*store->Sequence("charlie"), *store->Sequence("alpha"));
  EXPECT_LT(*store->Sequence("alpha"), *store->Sequence("bravo"));
}

TEST(JobStoreTest, MissingJobIsNulloptAndSequenceNotFound) {
  std::unique_ptr<SqliteJobStore> store = OpenOrDie(TempPath("db"));
  ASSERT_NE(store, nullptr);
  absl::StatusOr<std::optional<v1::Job>> got = store->Get("nobody");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_FALSE(got->has_value());
  EXPECT_EQ(store->Sequence("nobody").status().code(), absl::StatusCode::kNotFound);
  absl::StatusOr<std::vector<v1::Job>> jobs = store->List();
  ASSERT_TRUE(jobs.ok());
  EXPECT_TRUE(jobs->empty());
}

TEST(JobStoreTest, PutRejectsAJobWithoutAName) {
  std::unique_ptr<SqliteJobStore> store = OpenOrDie(TempPath("db"));
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(Put(*store, v1::Job()).code(), absl::StatusCode::kInvalidArgument);
}

TEST(JobStoreTest, ReplaceKeepsTheSequenceAndTheQueuePosition) {
  std::unique_ptr<SqliteJobStore> store = OpenOrDie(TempPath("db"));
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(Put(*store, MakeJob("first")).ok());
  ASSERT_TRUE(Put(*store, MakeJob("second")).ok());
  int64_t sequence = *store->Sequence("first");

  ASSERT_TRUE(Put(*store, MakeJob("first", v1::RUNNING, 2)).ok());
  EXPECT_EQ(*store->Sequence("first"), sequence);
  absl::StatusOr<std::vector<v1::Job>> jobs = store->List();
  ASSERT_TRUE(jobs.ok());
  EXPECT_EQ(Names(*jobs), (std::vector<std::string>{"first", "second"}));
  EXPECT_EQ((*jobs)[0].status().phase(), v1::RUNNING);
  EXPECT_EQ((*jobs)[0].version(), 2);
  // A job put after the replacement still queues behind both.
  ASSERT_TRUE(Put(*store, MakeJob("third")).ok());
  EXPECT_GT(*store->Sequence("third"), *store->Sequence("second"));
}

TEST(JobStoreTest, DataSurvivesClosingAndReopening) {
  std::string path = TempPath("db");
  int64_t sequence = 0;
  {
    std::unique_ptr<SqliteJobStore> store = OpenOrDie(path);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(Put(*store, MakeJob("a")).ok());
    ASSERT_TRUE(Put(*store, MakeJob("b", v1::SUCCEEDED, 9)).ok());
    sequence = *store->Sequence("b");
  }
  std::unique_ptr<SqliteJobStore> store = OpenOrDie(path);
  ASSERT_NE(store, nullptr);
  absl::StatusOr<std::vector<v1::Job>> jobs = store->List();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(Names(*jobs), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ((*jobs)[1].SerializeAsString(), MakeJob("b", v1::SUCCEEDED, 9).SerializeAsString());
  EXPECT_EQ(*store->Sequence("b"), sequence);
  ASSERT_TRUE(Put(*store, MakeJob("c")).ok());
  EXPECT_GT(*store->Sequence("c"), sequence);
}

TEST(JobStoreTest, AcknowledgedPutSurvivesSigkillOfTheWriter) {
  std::string path = TempPath("db");
  int ack[2];
  ASSERT_EQ(pipe(ack), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(ack[0]);
    absl::StatusOr<std::unique_ptr<SqliteJobStore>> store = SqliteJobStore::Open(path);
    if (!store.ok() || !Put(**store, MakeJob("durable", v1::RUNNING, 3)).ok()) _exit(1);
    char byte = 'k';
    if (write(ack[1], &byte, 1) != 1) _exit(2);
    for (;;) pause();  // Killed here, connection still open, WAL not checkpointed.
  }
  close(ack[1]);
  char byte = 0;
  ASSERT_EQ(read(ack[0], &byte, 1), 1) << "the child failed before acknowledging its Put";
  close(ack[0]);
  ASSERT_EQ(kill(child, SIGKILL), 0);
  int wstatus = 0;
  ASSERT_EQ(waitpid(child, &wstatus, 0), child);
  ASSERT_TRUE(WIFSIGNALED(wstatus) && WTERMSIG(wstatus) == SIGKILL);

  std::unique_ptr<SqliteJobStore> store = OpenOrDie(path);
  ASSERT_NE(store, nullptr);
  absl::StatusOr<std::optional<v1::Job>> got = store->Get("durable");
  ASSERT_TRUE(got.ok()) << got.status();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ((*got)->SerializeAsString(), MakeJob("durable", v1::RUNNING, 3).SerializeAsString());
}

TEST(JobStoreTest, GarbageFileIsRefusedWithDataLossAndLeftUnchanged) {
  std::string path = TempPath("garbage");
  std::mt19937 rng(42);
  std::string garbage(8192, '\0');
  for (char& c : garbage) c = static_cast<char>(rng());
  { std::ofstream(path, std::ios::binary) << garbage; }

  absl::StatusOr<std::unique_ptr<SqliteJobStore>> store = SqliteJobStore::Open(path);
  EXPECT_EQ(store.status().code(), absl::StatusCode::kDataLoss) << store.status();
  EXPECT_THAT(store.status().message(), HasSubstr(path));
  EXPECT_EQ(ReadFile(path), garbage);
  EXPECT_FALSE(Exists(path + "-wal"));
}

TEST(JobStoreTest, AnotherApplicationsDatabaseIsRefusedWithDataLoss) {
  std::string path = TempPath("foreign");
  ExecRaw(path, "CREATE TABLE jobs (id INTEGER, payload TEXT); INSERT INTO jobs VALUES (1, 'x');");
  std::string before = ReadFile(path);

  absl::StatusOr<std::unique_ptr<SqliteJobStore>> store = SqliteJobStore::Open(path);
  EXPECT_EQ(store.status().code(), absl::StatusCode::kDataLoss) << store.status();
  EXPECT_THAT(store.status().message(), HasSubstr(path));
  EXPECT_EQ(ReadFile(path), before);
}

TEST(JobStoreTest, NewerSchemaVersionIsRefusedWithDataLoss) {
  std::string path = TempPath("db");
  ASSERT_NE(OpenOrDie(path), nullptr);
  ExecRaw(path, "PRAGMA user_version = 99;");
  absl::StatusOr<std::unique_ptr<SqliteJobStore>> store = SqliteJobStore::Open(path);
  EXPECT_EQ(store.status().code(), absl::StatusCode::kDataLoss) << store.status();
  EXPECT_THAT(store.status().message(), HasSubstr("99"));
}

TEST(JobStoreTest, EmptyFileBecomesAStore) {
  std::string path = TempPath("empty");
  { std::ofstream touch(path); }
  std::unique_ptr<SqliteJobStore> store = OpenOrDie(path);
  ASSERT_NE(store, nullptr);
  EXPECT_TRUE(Put(*store, MakeJob("a")).ok());
}

TEST(JobStoreTest, UnopenablePathIsUnavailable) {
  std::string path = TempPath("no-such-directory") + "/jobs.db";
  absl::StatusOr<std::unique_ptr<SqliteJobStore>> store = SqliteJobStore::Open(path);
  EXPECT_EQ(store.status().code(), absl::StatusCode::kUnavailable) << store.status();
  EXPECT_THAT(store.status().message(), HasSubstr(path));
}

TEST(JobStoreTest, AnUnparsableRowIsLeftOutOfTheListKeptAndReplacedByANewJobOfItsName) {
  std::string path = TempPath("db");
  {
    std::unique_ptr<SqliteJobStore> store = OpenOrDie(path);
    ASSERT_NE(store, nullptr);
    ASSERT_TRUE(Put(*store, MakeJob("good")).ok());
    ASSERT_TRUE(Put(*store, MakeJob("mangled")).ok());
    ASSERT_TRUE(Put(*store, MakeJob("also-good")).ok());
  }
  // Field 1, wire type 2, length 100, but only 2 bytes follow.
  ExecRaw(path, "UPDATE jobs SET job = x'0a644142' WHERE name = 'mangled';");
  std::unique_ptr<SqliteJobStore> store = OpenOrDie(path);
  ASSERT_NE(store, nullptr);
  absl::StatusOr<std::vector<v1::Job>> jobs = store->List();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].name(), "good");
  EXPECT_EQ((*jobs)[1].name(), "also-good");
  // The damaged row is still there, and reading it says what is wrong.
  absl::StatusOr<std::optional<v1::Job>> mangled = store->Get("mangled");
  EXPECT_EQ(mangled.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(mangled.status().message(), HasSubstr("'mangled'"));
  EXPECT_THAT(mangled.status().message(), HasSubstr(path));
  // A job submitted under its name replaces it.
  ASSERT_TRUE(Put(*store, MakeJob("mangled")).ok());
  jobs = store->List();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(jobs->size(), 3u);
}

TEST(JobStoreTest, NamesWithQuotesAndSqlMetacharactersAreStoredAsData) {
  std::unique_ptr<SqliteJobStore> store = OpenOrDie(TempPath("db"));
  ASSERT_NE(store, nullptr);
  const std::vector<std::string> names = {
      "it's",
      "say \"hi\"",
      "x'); DROP TABLE jobs; --",
      "%",
      "_",
      "a%b_c\\",
      "semi;colon",
      "?1",
      "multi\nline",
      std::string("nul\0byte", 8),
      "nul",
  };
  for (const std::string& name : names) ASSERT_TRUE(Put(*store, MakeJob(name)).ok()) << name;

  absl::StatusOr<std::vector<v1::Job>> jobs = store->List();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  EXPECT_EQ(Names(*jobs), names);
  for (const std::string& name : names) {
    absl::StatusOr<std::optional<v1::Job>> got = store->Get(name);
    ASSERT_TRUE(got.ok() && got->has_value()) << name;
    EXPECT_EQ((*got)->name(), name);
  }
  absl::StatusOr<std::optional<v1::Job>> wildcard = store->Get("%s");
  ASSERT_TRUE(wildcard.ok());
  EXPECT_FALSE(wildcard->has_value());
}

TEST(JobStoreTest, ConcurrentPutsFromSeveralThreadsAllLand) {
  std::unique_ptr<SqliteJobStore> store = OpenOrDie(TempPath("db"));
  ASSERT_NE(store, nullptr);
  constexpr int kThreads = 8;
  constexpr int kJobsPerThread = 20;
  std::vector<std::thread> threads;
  std::vector<int> failures(kThreads, 0);
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&store, &failures, t] {
      for (int i = 0; i < kJobsPerThread; ++i) {
        std::string name = absl::StrCat("job-", t, "-", i);
        if (!Put(*store, MakeJob(name)).ok()) ++failures[t];
        if (i % 2 == 0 && !Put(*store, MakeJob(name, v1::RUNNING, 2)).ok()) ++failures[t];
        if (!store->Get(name).ok()) ++failures[t];
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(failures[t], 0) << "thread " << t;

  absl::StatusOr<std::vector<v1::Job>> jobs = store->List();
  ASSERT_TRUE(jobs.ok()) << jobs.status();
  ASSERT_EQ(jobs->size(), static_cast<size_t>(kThreads * kJobsPerThread));
  std::set<std::string> names;
  std::set<int64_t> sequences;
  for (const v1::Job& job : *jobs) {
    names.insert(job.name());
    sequences.insert(*store->Sequence(job.name()));
  }
  EXPECT_EQ(names.size(), jobs->size());
  EXPECT_EQ(sequences.size(), jobs->size());
  for (int t = 0; t < kThreads; ++t) {
    absl::StatusOr<std::optional<v1::Job>> got = store->Get(absl::StrCat("job-", t, "-0"));
    ASSERT_TRUE(got.ok() && got->has_value());
    EXPECT_EQ((*got)->status().phase(), v1::RUNNING);
  }
}

}  // namespace
}  // namespace paci

namespace paci {
namespace {

TEST(JobStoreTest, ApplyWritesAndDeletesInOneTransactionAndDeleteIsDurable) {
  const std::string path = TempPath("apply.db");
  {
    std::unique_ptr<SqliteJobStore> store = OpenOrDie(path);
    ASSERT_TRUE(Put(*store, MakeJob("old")).ok());
    ASSERT_TRUE(store->Apply({MakeJob("a"), MakeJob("b"), MakeJob("a", v1::RUNNING, 2)}, {"old"}).ok());
    EXPECT_TRUE(store->Apply({}, {"missing"}).ok());
  }
  std::unique_ptr<SqliteJobStore> store = OpenOrDie(path);
  absl::StatusOr<std::vector<v1::Job>> jobs = store->List();
  ASSERT_TRUE(jobs.ok());
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].name(), "a");
  EXPECT_EQ((*jobs)[0].status().phase(), v1::RUNNING);
  EXPECT_EQ((*jobs)[1].name(), "b");
  EXPECT_EQ(*store->Get("old"), std::nullopt);
  // A batch with a bad job lands not at all.
  EXPECT_FALSE(store->Apply({MakeJob("c"), v1::Job{}}, {}).ok());
  EXPECT_EQ(*store->Get("c"), std::nullopt);
}

}  // namespace
}  // namespace paci
