#include "server/job_queue.h"

#include <algorithm>
#include <random>
#include <set>

#include "gtest/gtest.h"

namespace paci {
namespace {

using Labels = std::map<std::string, std::string>;

PendingJob Job(std::string name, int64_t sequence, int num_workers, int priority = 0,
               Labels selector = {}) {
  return {std::move(name), priority, sequence, num_workers, std::move(selector)};
}

WorkerSlot Idle(std::string id, Labels labels = {}) { return {std::move(id), std::move(labels), true}; }
WorkerSlot Busy(std::string id, Labels labels = {}) { return {std::move(id), std::move(labels), false}; }

std::vector<std::string> Names(const std::vector<Placement>& placements) {
  std::vector<std::string> names;
  for (const Placement& p : placements) names.push_back(p.job_name);
  return names;
}

TEST(JobQueueTest, PlacesInPriorityThenSubmissionOrderAndStopsAtTheFirstThatWaits) {
  JobQueue queue;
  queue.Add(Job("late", 3, 1));
  queue.Add(Job("urgent", 4, 1, /*priority=*/5));
  queue.Add(Job("big", 1, 2));
  queue.Add(Job("small", 2, 1));
  SchedulingDecision d = queue.Schedule({Idle("w1"), Idle("w2"), Busy("w3")});
  EXPECT_EQ(Names(d.placements), (std::vector<std::string>{"urgent"}));
  EXPECT_EQ(d.waiting, (std::vector<std::string>{"big"}));  // and nothing behind it is looked at
  EXPECT_EQ(queue.size(), 3u);
  d = queue.Schedule({Idle("w1"), Idle("w2"), Idle("w3")});
  EXPECT_EQ(Names(d.placements), (std::vector<std::string>{"big", "small"}));
  EXPECT_EQ(queue.size(), 1u);
}

TEST(JobQueueTest, UnschedulableJobsAreParkedUntilAMatchingWorkerRegisters) {
  JobQueue queue;
  for (int i = 0; i < 1000; ++i) queue.Add(Job("gpu-" + std::to_string(i), i, 2, 0, {{"gpu", "a"}}));
  queue.Add(Job("cpu", 1000, 1, 0, {{"cpu", "x"}}));
  std::vector<WorkerSlot> pool = {Idle("c1", {{"cpu", "x"}})};
  SchedulingDecision d = queue.Schedule(pool);
  EXPECT_EQ(d.unschedulable.size(), 1000u);
  EXPECT_EQ(Names(d.placements), (std::vector<std::string>{"cpu"}));
  EXPECT_EQ(queue.parked(), 1000u);
  // Parked jobs are not looked at again: a pass finds nothing to report.
  d = queue.Schedule(pool);
  EXPECT_TRUE(d.unschedulable.empty() && d.placements.empty() && d.waiting.empty());

  // A worker of another kind unparks nothing; one GPU worker is not enough for 2 stages.
  pool.push_back(Idle("c2", {{"cpu", "x"}}));
  queue.WorkerAdded({{"cpu", "x"}}, pool);
  pool.push_back(Idle("g1", {{"gpu", "a"}}));
  queue.WorkerAdded({{"gpu", "a"}}, pool);
  EXPECT_EQ(queue.parked(), 1000u);
  pool.push_back(Idle("g2", {{"gpu", "a"}, {"zone", "z"}}));
  queue.WorkerAdded(pool.back().labels, pool);
  EXPECT_EQ(queue.parked(), 0u);
  d = queue.Schedule(pool);
  ASSERT_EQ(d.placements.size(), 1u);
  EXPECT_EQ(d.placements[0].job_name, "gpu-0");
  EXPECT_EQ(d.placements[0].worker_ids, (std::vector<std::string>{"g1", "g2"}));
  EXPECT_EQ(d.waiting, (std::vector<std::string>{"gpu-1"}));
}

TEST(JobQueueTest, RemoveTakesReadyAndParkedJobsOut) {
  JobQueue queue;
  queue.Add(Job("a", 2, 1));
  queue.Add(Job("b", 1, 3));
  queue.Schedule({Busy("w1")});  // b parks, a waits
  EXPECT_EQ(queue.parked(), 1u);
  EXPECT_TRUE(queue.Remove("b"));
  EXPECT_TRUE(queue.Remove("a"));
  EXPECT_FALSE(queue.Remove("a"));
  EXPECT_EQ(queue.size(), 0u);
  queue.WorkerAdded({}, {Idle("w1"), Idle("w2"), Idle("w3")});  // no group left to unpark
  EXPECT_TRUE(queue.Schedule({Idle("w1")}).placements.empty());
}

// Random queues and pools that grow, shrink and change: every pass places
// exactly what ScheduleJobs places for the same jobs and workers, and every
// job it calls unschedulable ScheduleJobs calls so too.
TEST(JobQueueTest, PlacesExactlyAsScheduleJobsAcrossRandomEvents) {
  std::mt19937 random(19);
  const std::vector<Labels> label_sets = {{}, {{"pool", "a"}}, {{"pool", "b"}},
                                          {{"pool", "a"}, {"gpu", "1"}}};
  for (int trial = 0; trial < 200; ++trial) {
    JobQueue queue;
    std::vector<PendingJob> reference;
    std::vector<WorkerSlot> pool;
    int64_t sequence = 0;
    int worker_ids = 0;
    for (int round = 0; round < 12; ++round) {
      const int event = static_cast<int>(random() % 4);
      if (event == 0 || pool.empty()) {  // a worker registers
        WorkerSlot worker = Idle("w" + std::to_string(worker_ids++),
                                 label_sets[random() % label_sets.size()]);
        pool.push_back(worker);
        queue.WorkerAdded(worker.labels, pool);
      } else if (event == 1) {  // a worker leaves
        pool.erase(pool.begin() + static_cast<long>(random() % pool.size()));
      } else if (event == 2) {  // a worker frees up or becomes busy
        WorkerSlot& worker = pool[random() % pool.size()];
        worker.idle = !worker.idle;
      }
      for (int n = static_cast<int>(random() % 4); n > 0; --n) {  // submissions
        PendingJob job = Job("j" + std::to_string(sequence), sequence,
                             static_cast<int>(random() % 4), static_cast<int>(random() % 3),
                             label_sets[random() % label_sets.size()]);
        ++sequence;
        queue.Add(job);
        reference.push_back(job);
      }
      SchedulingDecision expected = ScheduleJobs(reference, pool);
      SchedulingDecision actual = queue.Schedule(pool);
      ASSERT_EQ(Names(actual.placements), Names(expected.placements)) << "trial " << trial;
      for (size_t i = 0; i < actual.placements.size(); ++i) {
        ASSERT_EQ(actual.placements[i].worker_ids, expected.placements[i].worker_ids);
      }
      for (const std::string& name : actual.unschedulable) {
        EXPECT_NE(std::find(expected.unschedulable.begin(), expected.unschedulable.end(), name),
                  expected.unschedulable.end());
      }
      // Placed workers are busy from now on; placed jobs leave the reference queue.
      std::set<std::string> placed;
      for (const Placement& p : actual.placements) {
        placed.insert(p.job_name);
        for (const std::string& id : p.worker_ids) {
          for (WorkerSlot& w : pool) {
            if (w.worker_id == id) w.idle = false;
          }
        }
      }
      reference.erase(std::remove_if(reference.begin(), reference.end(),
                                     [&](const PendingJob& j) { return placed.count(j.name); }),
                      reference.end());
      ASSERT_EQ(queue.size(), reference.size());
    }
  }
}

}  // namespace
}  // namespace paci
