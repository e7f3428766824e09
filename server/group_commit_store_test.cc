#include "server/group_commit_store.h"

#include <atomic>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

namespace paci {
namespace {

using ::testing::ElementsAre;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

v1::Job Version(const std::string& name, int64_t version) {
  v1::Job job;
  job.set_name(name);
  job.set_version(version);
  return job;
}

// The store below: what it holds, every write it was handed, and whether a
// write ever went back to an older version of a job. It fails while told to,
// and its first write waits until released when told to.
class RecordingStore : public JobStore {
 public:
  absl::StatusOr<std::vector<v1::Job>> List() const override {
    absl::MutexLock lock(&mu_);
    std::vector<v1::Job> jobs;
    for (const auto& [name, version] : held_) jobs.push_back(Version(name, version));
    return jobs;
  }
  absl::Status Apply(const std::vector<v1::Job>& puts,
                     const std::vector<std::string>& deletes) override {
    if (hold_first_.exchange(false)) {
      entered_.Notify();
      release_.WaitForNotification();
    }
    absl::MutexLock lock(&mu_);
    if (!answer_.ok()) return answer_;
    std::vector<std::pair<std::string, int64_t>> write;
    for (const v1::Job& job : puts) {
      auto it = held_.find(job.name());
      if (it != held_.end() && it->second > job.version()) went_back_ = true;
      held_[job.name()] = job.version();
      write.emplace_back(job.name(), job.version());
    }
    for (const std::string& name : deletes) held_.erase(name);
    writes_.push_back(std::move(write));
    return absl::OkStatus();
  }

  void Answer(absl::Status answer) {
    absl::MutexLock lock(&mu_);
    answer_ = std::move(answer);
  }
  void HoldFirstWrite() { hold_first_ = true; }
  void WaitUntilHeld() { entered_.WaitForNotification(); }
  void Release() { release_.Notify(); }
  std::map<std::string, int64_t> held() const {
    absl::MutexLock lock(&mu_);
    return held_;
  }
  std::vector<std::vector<std::pair<std::string, int64_t>>> writes() const {
    absl::MutexLock lock(&mu_);
    return writes_;
  }
  bool went_back() const {
    absl::MutexLock lock(&mu_);
    return went_back_;
  }

 private:
  mutable absl::Mutex mu_;
  std::map<std::string, int64_t> held_;
  std::vector<std::vector<std::pair<std::string, int64_t>>> writes_;
  absl::Status answer_;
  bool went_back_ = false;
  std::atomic<bool> hold_first_{false};
  absl::Notification entered_, release_;
};

TEST(GroupCommitStoreTest, OnlyEachJobsNewestVersionIsWrittenAndNeverAnOlderOne) {
  RecordingStore below;
  GroupCommitStore store(below);
  ASSERT_TRUE(store.Apply({Version("a", 2), Version("a", 4), Version("a", 3), Version("b", 1)}, {})
                  .ok());
  EXPECT_THAT(below.writes().back(), ElementsAre(Pair("a", 4), Pair("b", 1)));
  // An older version of a (a write still on its way) is not written again; b's newer is.
  ASSERT_TRUE(store.Apply({Version("a", 3), Version("b", 2)}, {}).ok());
  EXPECT_THAT(below.writes().back(), ElementsAre(Pair("b", 2)));
  EXPECT_THAT(below.held(), UnorderedElementsAre(Pair("a", 4), Pair("b", 2)));
  EXPECT_FALSE(below.went_back());
}

TEST(GroupCommitStoreTest, ARemovedJobStaysRemovedUntilSubmittedAgainAtVersionOne) {
  RecordingStore below;
  GroupCommitStore store(below);
  ASSERT_TRUE(store.Apply({Version("a", 5)}, {}).ok());
  ASSERT_TRUE(store.Apply({}, {"a"}).ok());
  // A late write of the removed job does not bring it back ...
  ASSERT_TRUE(store.Apply({Version("a", 6)}, {}).ok());
  EXPECT_TRUE(below.held().empty());
  // ... a new submission of that name (version 1) does.
  ASSERT_TRUE(store.Apply({Version("a", 1)}, {}).ok());
  EXPECT_THAT(below.held(), ElementsAre(Pair("a", 1)));
}

// After a restart, what the store held counts as written.
TEST(GroupCommitStoreTest, WhatListReturnedCountsAsWritten) {
  RecordingStore below;
  ASSERT_TRUE(below.Apply({Version("a", 7)}, {}).ok());
  GroupCommitStore store(below);
  ASSERT_TRUE(store.List().ok());
  ASSERT_TRUE(store.Apply({Version("a", 6)}, {}).ok());
  EXPECT_THAT(below.held(), ElementsAre(Pair("a", 7)));
}

// A refused batch is refused to its caller, and its jobs count as unwritten:
// the same versions are written when offered again.
TEST(GroupCommitStoreTest, ARefusedBatchIsReportedAndItsJobsWrittenWhenOfferedAgain) {
  RecordingStore below;
  GroupCommitStore store(below);
  below.Answer(absl::UnavailableError("disk full"));
  EXPECT_EQ(store.Apply({Version("a", 2)}, {}).code(), absl::StatusCode::kUnavailable);
  below.Answer(absl::OkStatus());
  ASSERT_TRUE(store.Apply({Version("a", 2)}, {}).ok());
  EXPECT_THAT(below.held(), ElementsAre(Pair("a", 2)));
}

// Group commit: the callers that arrive while a write is under way are
// written together, in one write of the store below, once it is over.
TEST(GroupCommitStoreTest, CallersArrivingDuringAWriteAreWrittenTogetherInOneWrite) {
  RecordingStore below;
  GroupCommitStore store(below);
  below.HoldFirstWrite();
  std::thread first([&] { EXPECT_TRUE(store.Apply({Version("first", 1)}, {}).ok()); });
  below.WaitUntilHeld();
  std::vector<std::thread> callers;
  for (int c = 0; c < 5; ++c) {
    callers.emplace_back([&, c] {
      EXPECT_TRUE(store.Apply({Version("caller-" + std::to_string(c), 1)}, {}).ok());
    });
  }
  // Every caller has joined the batch being gathered (bounded: a minute).
  ASSERT_TRUE(store.AwaitGathered(5, absl::Minutes(1)));
  ASSERT_EQ(store.Gathered(), 5);
  below.Release();
  first.join();
  for (std::thread& caller : callers) caller.join();
  const auto writes = below.writes();
  ASSERT_EQ(writes.size(), 2u);
  EXPECT_THAT(writes[0], ElementsAre(Pair("first", 1)));
  EXPECT_EQ(writes[1].size(), 5u);
  EXPECT_EQ(store.Gathered(), 0);
}

// While one write is under way, the callers that arrive wait for it and then
// for the batch they are in; each gets its batch's outcome. The order the
// threads arrive in is the scheduler's: what holds whatever it is, is that
// every caller hears back, the store never goes back to an older version, and
// it ends with each job's newest.
TEST(GroupCommitStoreTest, ConcurrentWritersAllHearBackAndTheNewestVersionsLand) {
  RecordingStore below;
  GroupCommitStore store(below);
  below.HoldFirstWrite();
  std::thread first([&] { EXPECT_TRUE(store.Apply({Version("job-0", 1)}, {}).ok()); });
  below.WaitUntilHeld();
  constexpr int kThreads = 6, kWrites = 40;
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&, t] {
      // Each thread writes versions 1..kWrites of its own job and of a shared one.
      for (int v = 1; v <= kWrites; ++v) {
        EXPECT_TRUE(store.Apply({Version("job-" + std::to_string(t + 1), v),
                                 Version("shared", (v - 1) * kThreads + t + 2)},
                                {})
                        .ok());
      }
    });
  }
  below.Release();
  first.join();
  for (std::thread& writer : writers) writer.join();
  EXPECT_FALSE(below.went_back());
  const std::map<std::string, int64_t> held = below.held();
  for (int t = 0; t <= kThreads; ++t) {
    EXPECT_EQ(held.at("job-" + std::to_string(t)), t == 0 ? 1 : kWrites);
  }
  EXPECT_EQ(held.at("shared"), kWrites * kThreads + 1);  // the highest any thread wrote
}

}  // namespace
}  // namespace paci
