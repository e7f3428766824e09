#include "server/job_scheduler.h"

#include <algorithm>
#include <ostream>
#include <random>
#include <set>

#include "gtest/gtest.h"

namespace paci {

bool operator==(const Placement& a, const Placement& b) {
  return a.job_name == b.job_name && a.worker_ids == b.worker_ids;
}

void PrintTo(const Placement& p, std::ostream* os) {
  *os << p.job_name << "->[";
  for (size_t i = 0; i < p.worker_ids.size(); ++i) *os << (i ? "," : "") << p.worker_ids[i];
  *os << "]";
}

namespace {

using Labels = std::map<std::string, std::string>;

WorkerSlot Idle(std::string id, Labels labels = {}) { return {std::move(id), std::move(labels), true}; }
WorkerSlot Busy(std::string id, Labels labels = {}) { return {std::move(id), std::move(labels), false}; }

PendingJob Job(std::string name, int64_t sequence, int num_workers, int priority = 0,
               Labels selector = {}) {
  return {std::move(name), priority, sequence, num_workers, std::move(selector)};
}

struct Case {
  std::string name;
  std::vector<PendingJob> queue;
  std::vector<WorkerSlot> workers;
  std::vector<Placement> placements;
  std::vector<std::string> unschedulable;
  std::vector<std::string> waiting;
};

const Labels kGpu = {{"accelerator", "gpu"}};
const Labels kGpuZoneA = {{"accelerator", "gpu"}, {"zone", "a"}};

std::vector<Case> Cases() {
  return {
      {"PlacedWhenPIdleWorkersExist",
       {Job("j", 1, 3)},
       {Idle("w0"), Idle("w1"), Idle("w2")},
       {{"j", {"w0", "w1", "w2"}}}, {}, {}},
      {"WaitingWithPMinusOneIdleWorkers",
       {Job("j", 1, 3)},
       {Idle("w0"), Busy("w1"), Idle("w2")},
       {}, {}, {"j"}},
      {"UnschedulableWhenThePoolIsSmallerThanP",
       {Job("j", 1, 3)},
       {Idle("w0"), Idle("w1")},
       {}, {"j"}, {}},
      {"TwoJobsOnAPoolThatFitsBoth",
       {Job("a", 1, 2), Job("b", 2, 3)},
       {Idle("w0"), Idle("w1"), Idle("w2"), Idle("w3"), Idle("w4")},
       {{"a", {"w0", "w1"}}, {"b", {"w2", "w3", "w4"}}}, {}, {}},
      {"SecondQueuedUntilTheFirstsWorkersFree",
       {Job("b", 2, 2)},
       {Busy("w0"), Busy("w1"), Idle("w2")},
       {}, {}, {"b"}},
      {"SecondPlacedOnceTheFirstsWorkersFree",
       {Job("b", 2, 2)},
       {Idle("w0"), Idle("w1"), Idle("w2")},
       {{"b", {"w0", "w1"}}}, {}, {}},
      {"PriorityBeatsFifo",
       {Job("early-low", 1, 2, 0), Job("late-high", 2, 2, 5)},
       {Idle("w0"), Idle("w1"), Idle("w2")},
       {{"late-high", {"w0", "w1"}}}, {}, {"early-low"}},
      {"FifoWithinAPriority",
       {Job("late", 9, 1), Job("early", 3, 1)},
       {Idle("w0"), Idle("w1")},
       {{"early", {"w0"}}, {"late", {"w1"}}}, {}, {}},
      {"SmallerLaterJobDoesNotJumpAWaitingEarlierJob",
       {Job("big", 1, 3), Job("small", 2, 1)},
       {Idle("w0"), Idle("w1"), Busy("w2")},
       {}, {}, {"big", "small"}},
      {"LowerPriorityDoesNotJumpAWaitingHigherPriorityJob",
       {Job("high", 5, 2, 9), Job("low", 1, 1, 0)},
       {Idle("w0"), Busy("w1")},
       {}, {}, {"high", "low"}},
      {"SelectorIsASubsetOfTheLabels",
       {Job("j", 1, 2, 0, kGpu)},
       {Idle("cpu0", {{"accelerator", "cpu"}}), Idle("g0", kGpuZoneA), Idle("bare"),
        Idle("g1", {{"accelerator", "gpu"}, {"zone", "b"}})},
       {{"j", {"g0", "g1"}}}, {}, {}},
      {"SelectorValueMustMatchExactly",
       {Job("j", 1, 1, 0, kGpuZoneA)},
       {Idle("g0", {{"accelerator", "gpu"}, {"zone", "b"}}), Idle("g1", kGpuZoneA)},
       {{"j", {"g1"}}}, {}, {}},
      {"UnmatchedSelectorIsUnschedulableAndDoesNotBlockTheNext",
       {Job("tpu", 1, 1, 0, {{"accelerator", "tpu"}}), Job("next", 2, 2)},
       {Idle("w0", kGpu), Idle("w1")},
       {{"next", {"w0", "w1"}}}, {"tpu"}, {}},
      {"UnschedulableBehindAWaitingJobIsStillUnschedulable",
       {Job("big", 1, 2), Job("huge", 2, 9), Job("small", 3, 1)},
       {Idle("w0"), Busy("w1")},
       {}, {"huge"}, {"big", "small"}},
      {"SelectorCountsBusyWorkersAsPartOfThePool",
       {Job("j", 1, 2, 0, kGpu)},
       {Busy("g0", kGpu), Idle("g1", kGpu), Idle("c0")},
       {}, {}, {"j"}},
      {"AWorkerIsNeverPlacedTwice",
       {Job("a", 1, 2), Job("b", 2, 2)},
       {Idle("w0"), Idle("w1"), Idle("w2")},
       {{"a", {"w0", "w1"}}}, {}, {"b"}},
      {"AWorkerListedTwiceCountsOnce",
       {Job("a", 1, 2)},
       {Idle("w0"), Idle("w0")},
       {}, {"a"}, {}},
      {"BusyWorkersAreNeverPlaced",
       {Job("a", 1, 2)},
       {Busy("w0"), Idle("w1"), Busy("w2"), Idle("w3")},
       {{"a", {"w1", "w3"}}}, {}, {}},
      {"WorkersAreTakenInTheOrderGiven",
       {Job("a", 1, 3)},
       {Idle("w9"), Idle("w1"), Idle("w5"), Idle("w0")},
       {{"a", {"w9", "w1", "w5"}}}, {}, {}},
      {"NonPositiveStageCountIsUnschedulable",
       {Job("zero", 1, 0), Job("ok", 2, 1)},
       {Idle("w0")},
       {{"ok", {"w0"}}}, {"zero"}, {}},
      {"EmptyQueue", {}, {Idle("w0")}, {}, {}, {}},
      {"NoWorkers", {Job("a", 1, 1)}, {}, {}, {"a"}, {}},
  };
}

class ScheduleJobsTest : public testing::TestWithParam<Case> {};

TEST_P(ScheduleJobsTest, Decides) {
  const Case& c = GetParam();
  SchedulingDecision decision = ScheduleJobs(c.queue, c.workers);
  EXPECT_EQ(decision.placements, c.placements);
  EXPECT_EQ(decision.unschedulable, c.unschedulable);
  EXPECT_EQ(decision.waiting, c.waiting);

  // Deterministic: the queue's input order does not matter.
  std::vector<PendingJob> reversed(c.queue.rbegin(), c.queue.rend());
  SchedulingDecision again = ScheduleJobs(reversed, c.workers);
  EXPECT_EQ(again.placements, decision.placements);
  EXPECT_EQ(again.unschedulable, decision.unschedulable);
  EXPECT_EQ(again.waiting, decision.waiting);
}

INSTANTIATE_TEST_SUITE_P(Table, ScheduleJobsTest, testing::ValuesIn(Cases()),
                         [](const testing::TestParamInfo<Case>& info) { return info.param.name; });

// Invariants over seeded random pools and queues: gang placement on idle, matching, distinct
// workers; every job in exactly one outcome; nothing placed after the first waiting job.
TEST(ScheduleJobsPropertyTest, PlacementsRespectGangIdlenessSelectorsAndFifo) {
  std::mt19937 rng(7);
  const std::vector<Labels> label_sets = {{}, kGpu, kGpuZoneA, {{"zone", "a"}}};
  for (int round = 0; round < 500; ++round) {
    std::vector<WorkerSlot> workers;
    for (int i = 0, n = rng() % 8; i < n; ++i) {
      workers.push_back({"w" + std::to_string(rng() % 10), label_sets[rng() % label_sets.size()],
                         rng() % 3 != 0});
    }
    std::vector<PendingJob> queue;
    for (int i = 0, n = rng() % 6; i < n; ++i) {
      queue.push_back(Job("j" + std::to_string(i), rng() % 100, 1 + rng() % 4, rng() % 3,
                          label_sets[rng() % label_sets.size()]));
    }
    SchedulingDecision decision = ScheduleJobs(queue, workers);

    std::map<std::string, const WorkerSlot*> first;  // the entry a repeated id resolves to
    for (const WorkerSlot& w : workers) first.emplace(w.worker_id, &w);
    std::map<std::string, const PendingJob*> jobs;
    for (const PendingJob& j : queue) jobs[j.name] = &j;
    std::set<std::string> used, outcomes;
    for (const Placement& p : decision.placements) {
      const PendingJob& job = *jobs.at(p.job_name);
      EXPECT_EQ(p.worker_ids.size(), static_cast<size_t>(job.num_workers)) << "round " << round;
      for (const std::string& id : p.worker_ids) {
        EXPECT_TRUE(used.insert(id).second) << "round " << round << ": " << id << " placed twice";
        const WorkerSlot& w = *first.at(id);
        EXPECT_TRUE(w.idle) << "round " << round;
        for (const auto& [k, v] : job.selector) {
          EXPECT_TRUE(w.labels.count(k) && w.labels.at(k) == v) << "round " << round;
        }
      }
      EXPECT_TRUE(outcomes.insert(p.job_name).second);
    }
    for (const auto& list : {decision.unschedulable, decision.waiting}) {
      for (const std::string& name : list) EXPECT_TRUE(outcomes.insert(name).second);
    }
    EXPECT_EQ(outcomes.size(), queue.size()) << "round " << round;
    // Strict FIFO: every placed job precedes, in (priority desc, sequence) order, every waiting one.
    for (const Placement& p : decision.placements) {
      for (const std::string& w : decision.waiting) {
        const PendingJob& a = *jobs.at(p.job_name);
        const PendingJob& b = *jobs.at(w);
        EXPECT_TRUE(a.priority > b.priority || (a.priority == b.priority && a.sequence <= b.sequence))
            << "round " << round << ": " << w << " waits behind later " << p.job_name;
      }
    }
  }
}

}  // namespace
}  // namespace paci
