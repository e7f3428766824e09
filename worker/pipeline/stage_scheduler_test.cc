#include "worker/pipeline/stage_scheduler.h"

#include <deque>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace paci {
namespace {

// Drives P real StageSchedulers against each other with FIFO links, no
// tensors and no clocks. In `adversarial` mode every event (a stage acting,
// a link delivering its oldest message) is picked at random, so any timing a
// real pipeline could show is reachable; otherwise stages act in lockstep
// rounds, which fills the pipe the way a steady 1F1B run does.
struct DriveResult {
  std::vector<int64_t> max_drift;
  std::vector<int64_t> max_warmup_drift;  // of the backwards before step warmup_steps
  std::vector<int64_t> final_version;
  std::vector<int64_t> drained_steps;
  std::vector<int> max_in_flight;
  // Backwards whose drift StepsBeforeBackward() did not foretell at their forward.
  int64_t mispredicted = 0;
  std::string error;
};

DriveResult Drive(ScheduleKind kind, int P, int a, int64_t steps, uint64_t seed, bool adversarial,
          int64_t eval_interval = 0, int64_t warmup_steps = 0) {
  std::vector<StageScheduler> stages;
  for (int s = 0; s < P; ++s) {
    StageSchedulerOptions o;
    o.schedule = kind;
    o.num_stages = P;
    o.stage = s;
    o.accumulation = a;
    o.total_steps = steps;
    o.eval_interval = eval_interval;
    o.warmup_steps = warmup_steps;
    stages.emplace_back(o);
  }
  // Per stage: activations delivered (from s-1) and gradients delivered (from
  // s+1); per link: messages in transit.
  std::vector<std::deque<uint64_t>> acts(P), grads(P), acts_transit(P), grads_transit(P);
  DriveResult run;
  run.max_drift.assign(P, 0);
  run.max_warmup_drift.assign(P, 0);
  run.max_in_flight.assign(P, 0);
  std::mt19937_64 rng(seed);
  // Per stage: what StepsBeforeBackward() said at each in-flight forward.
  std::vector<std::deque<int64_t>> foretold(P);
  bool done = false;
  auto act = [&](int s) -> bool {  // returns whether the stage did something
    StageScheduler& st = stages[s];
    switch (st.Next(!grads[s].empty(), !acts[s].empty())) {
      case StageAction::kForward: {
        uint64_t id;
        if (s == 0) {
          id = st.next_micro_batch();
        } else {
          id = acts[s].front();
          acts[s].pop_front();
        }
        foretold[s].push_back(st.StepsBeforeBackward(id));
        absl::Status status = st.OnForward(id);
        if (!status.ok()) run.error = status.ToString();
        run.max_in_flight[s] = std::max(run.max_in_flight[s], st.in_flight());
        if (s + 1 < P) acts_transit[s + 1].push_back(id);
        return true;
      }
      case StageAction::kBackward: {
        uint64_t id = st.oldest_in_flight();  // the last stage backs its own oldest
        if (s < P - 1) {
          id = grads[s].front();
          grads[s].pop_front();
        }
        const int64_t version = st.version();
        auto result = st.OnBackward(id);
        if (!result.ok()) {
          run.error = result.status().ToString();
          return true;
        }
        run.max_drift[s] = std::max(run.max_drift[s], result->drift);
        if (foretold[s].front() != result->drift) ++run.mispredicted;
        foretold[s].pop_front();
        if (version < warmup_steps) {
          run.max_warmup_drift[s] = std::max(run.max_warmup_drift[s], result->drift);
        }
        if (s > 0) grads_transit[s - 1].push_back(id);
        return true;
      }
      case StageAction::kDrained:
        run.drained_steps.push_back(st.drained_step());
        st.OnDrainHandled();
        return true;
      case StageAction::kDone:
        done = true;
        return false;
      case StageAction::kWait:
        return false;
    }
    return false;
  };
  auto deliver = [&](int s) -> bool {
    bool any = false;
    if (!acts_transit[s].empty()) {
      acts[s].push_back(acts_transit[s].front());
      acts_transit[s].pop_front();
      any = true;
    }
    if (!grads_transit[s].empty()) {
      grads[s].push_back(grads_transit[s].front());
      grads_transit[s].pop_front();
      any = true;
    }
    return any;
  };
  for (int64_t guard = 0; !done && run.error.empty(); ++guard) {
    if (guard > 10'000'000) {
      run.error = "did not finish";
      break;
    }
    bool progressed = false;
    if (adversarial) {
      // Try events in a random order until one makes progress.
      std::vector<int> events(2 * P);
      for (int i = 0; i < 2 * P; ++i) events[i] = i;
      std::shuffle(events.begin(), events.end(), rng);
      for (int e : events) {
        progressed = e < P ? act(e) : deliver(e - P);
        if (progressed || done) break;
      }
    } else {
      for (int s = 0; s < P; ++s) progressed |= act(s);
      for (int s = 0; s < P; ++s) while (deliver(s)) progressed = true;
    }
    if (!progressed && !done && run.error.empty()) run.error = "deadlock";
  }
  for (auto& st : stages) run.final_version.push_back(st.version());
  return run;
}

const ScheduleKind kAllSchedules[] = {ScheduleKind::kPaci, ScheduleKind::kOneFOneBFlush,
                                      ScheduleKind::kGpipe, ScheduleKind::kAsyncOneFOneB};

TEST(StageSchedulerTest, DriftNeverExceedsBoundUnderAdversarialArrivalOrders) {
  for (ScheduleKind kind : kAllSchedules) {
    for (int P = 1; P <= 8; ++P) {
      for (int a = 1; a <= 2 * P; ++a) {
        if (kind == ScheduleKind::kAsyncOneFOneB && a > 1) continue;
        for (uint64_t seed = 1; seed <= 3; ++seed) {
          const int64_t steps = 6;
          DriveResult run = Drive(kind, P, a, steps, seed * 7919 + P * 31 + a, /*adversarial=*/true);
          SCOPED_TRACE(ScheduleKindName(kind) + " P=" + std::to_string(P) +
                       " a=" + std::to_string(a));
          ASSERT_EQ(run.error, "");
          for (int s = 0; s < P; ++s) {
            EXPECT_LE(run.max_drift[s], DriftBound(kind, P, s, a)) << "stage " << s;
            EXPECT_EQ(run.final_version[s], steps) << "stage " << s;
          }
        }
      }
    }
  }
}

// Every row of the schedule table (common/schedule_kind.h) is what the scheduler
// runs: its accumulation, in-flight limit and drift bound are the row's.
TEST(StageSchedulerTest, EveryScheduleRowIsWhatTheSchedulerRuns) {
  for (const ScheduleTraits& row : Schedules()) {
    for (int P = 1; P <= 8; ++P) {
      for (int a = 1; a <= 2 * P; ++a) {
        for (int s = 0; s < P; ++s) {
          StageSchedulerOptions o;
          o.schedule = row.kind;
          o.num_stages = P;
          o.stage = s;
          o.accumulation = a;
          const StageScheduler scheduler(o);
          SCOPED_TRACE(std::string(row.name) + " P=" + std::to_string(P) +
                       " s=" + std::to_string(s) + " a=" + std::to_string(a));
          EXPECT_EQ(scheduler.accumulation(), row.effective_accumulation(a));
          EXPECT_EQ(scheduler.in_flight_limit(),
                    row.in_flight_limit(P, s, row.effective_accumulation(a)));
          EXPECT_EQ(scheduler.drift_bound(), row.drift_bound(P, s, a));
          EXPECT_EQ(scheduler.drift_bound(), DriftBound(row.kind, P, s, a));
        }
      }
    }
  }
}

// Every row's drift bound is tight: never exceeded under adversarial arrival
// orders, reached in steady state (for a flushing row, 0 both ways); and a
// flushing row drains after every step.
TEST(StageSchedulerTest, EveryScheduleRowReachesButNeverExceedsItsDriftBound) {
  for (const ScheduleTraits& row : Schedules()) {
    for (int P : {2, 4, 8}) {
      for (int a : {1, 2, P - 1, P, 2 * P}) {
        if (row.effective_accumulation(a) != a) continue;  // async-1f1b: a = 1 only
        const int64_t steps = 6 * P;
        SCOPED_TRACE(std::string(row.name) + " P=" + std::to_string(P) +
                     " a=" + std::to_string(a));
        const DriveResult steady = Drive(row.kind, P, a, steps, 1, /*adversarial=*/false);
        ASSERT_EQ(steady.error, "");
        for (int s = 0; s < P; ++s) {
          EXPECT_EQ(steady.max_drift[s], DriftBound(row.kind, P, s, a)) << "stage " << s;
          EXPECT_EQ(steady.final_version[s], steps) << "stage " << s;
        }
        if (row.flushes) EXPECT_EQ(static_cast<int64_t>(steady.drained_steps.size()), steps);
        for (uint64_t seed : {3, 11}) {
          const DriveResult run = Drive(row.kind, P, a, steps, seed, /*adversarial=*/true);
          ASSERT_EQ(run.error, "");
          for (int s = 0; s < P; ++s) {
            EXPECT_LE(run.max_drift[s], DriftBound(row.kind, P, s, a)) << "stage " << s;
          }
        }
      }
    }
  }
}

TEST(StageSchedulerTest, FlushingSchedulesShowNoDrift) {
  for (ScheduleKind kind : {ScheduleKind::kOneFOneBFlush, ScheduleKind::kGpipe}) {
    for (int P : {2, 4, 8}) {
      for (bool adversarial : {false, true}) {
        DriveResult run = Drive(kind, P, P, 5, 42, adversarial);
        ASSERT_EQ(run.error, "");
        for (int s = 0; s < P; ++s) EXPECT_EQ(run.max_drift[s], 0);
        // The flush drains the pipe after every step.
        EXPECT_EQ(run.drained_steps, (std::vector<int64_t>{1, 2, 3, 4, 5}));
      }
    }
  }
}

TEST(StageSchedulerTest, AsyncOneFOneBReachesPMinusOneMinusS) {
  for (int P : {2, 3, 4, 8}) {
    DriveResult run = Drive(ScheduleKind::kAsyncOneFOneB, P, 1, 4 * P, 1, /*adversarial=*/false);
    ASSERT_EQ(run.error, "");
    for (int s = 0; s < P; ++s) EXPECT_EQ(run.max_drift[s], P - 1 - s) << "P=" << P << " s=" << s;
  }
}

TEST(StageSchedulerTest, PaciReachesButNeverExceedsItsBoundInSteadyState) {
  for (int P : {2, 4, 8}) {
    for (int a : {2, P - 1, P, 2 * P}) {
      if (a < 1) continue;
      DriveResult run = Drive(ScheduleKind::kPaci, P, a, 6 * P, 1, /*adversarial=*/false);
      ASSERT_EQ(run.error, "");
      for (int s = 0; s < P; ++s) {
        EXPECT_EQ(run.max_drift[s], DriftBound(ScheduleKind::kPaci, P, s, a))
            << "P=" << P << " a=" << a << " s=" << s;
      }
    }
  }
}

TEST(StageSchedulerTest, InFlightStaysWithinOneFOneBLimitAndGpipeGroup) {
  DriveResult paci = Drive(ScheduleKind::kPaci, 4, 3, 10, 5, /*adversarial=*/true);
  ASSERT_EQ(paci.error, "");
  for (int s = 0; s < 4; ++s) EXPECT_LE(paci.max_in_flight[s], 4 - s);
  DriveResult gpipe = Drive(ScheduleKind::kGpipe, 4, 6, 3, 5, /*adversarial=*/false);
  ASSERT_EQ(gpipe.error, "");
  // GPipe holds the whole group of a on every stage, the last included.
  for (int s = 0; s < 4; ++s) EXPECT_EQ(gpipe.max_in_flight[s], 6);
}

TEST(StageSchedulerTest, AsynchronousScheduleDrainsOnlyAtEvalPointsAndTheEnd) {
  DriveResult run = Drive(ScheduleKind::kPaci, 3, 2, 10, 9, /*adversarial=*/true, /*eval_interval=*/4);
  ASSERT_EQ(run.error, "");
  EXPECT_EQ(run.drained_steps, (std::vector<int64_t>{4, 8, 10}));
}

// pipeline.warmup_steps: the first steps drain the pipe at every step, so
// nothing crosses a step (as in the flush, with the same a); then the drift is
// released and reaches the schedule's bound.
TEST(StageSchedulerTest, AWarmUpDrainsEveryStepThenReleasesTheDrift) {
  for (ScheduleKind kind : {ScheduleKind::kPaci, ScheduleKind::kAsyncOneFOneB}) {
    const int a = kind == ScheduleKind::kPaci ? 2 : 1;
    for (int P : {2, 4}) {
      for (bool adversarial : {false, true}) {
        SCOPED_TRACE(absl::StrCat(ScheduleKindName(kind), " P=", P, " adversarial=", adversarial));
        const int64_t steps = 5 + 6 * P;
        DriveResult run = Drive(kind, P, a, steps, 3, adversarial, /*eval_interval=*/0,
                                /*warmup_steps=*/5);
        ASSERT_EQ(run.error, "");
        EXPECT_EQ(run.drained_steps, (std::vector<int64_t>{1, 2, 3, 4, 5, steps}));
        for (int s = 0; s < P; ++s) {
          EXPECT_EQ(run.max_warmup_drift[s], 0) << "s=" << s;
          EXPECT_LE(run.max_drift[s], DriftBound(kind, P, s, a)) << "s=" << s;
          if (!adversarial) EXPECT_EQ(run.max_drift[s], DriftBound(kind, P, s, a)) << "s=" << s;
        }
      }
    }
  }
}

// pipeline.drift_correction "predict" extrapolates a forward's weights by the
// steps its backward will have crossed: StepsBeforeBackward() at the forward is
// that drift exactly, for every schedule, with warm-up, evaluation drains and
// adversarial arrival orders.
TEST(StageSchedulerTest, StepsBeforeBackwardForetellsEveryDriftExactly) {
  for (ScheduleKind kind : kAllSchedules) {
    for (int P : {2, 3, 5}) {
      for (int a : {1, 2, 3}) {
        for (bool adversarial : {false, true}) {
          SCOPED_TRACE(absl::StrCat(ScheduleKindName(kind), " P=", P, " a=", a,
                                    " adversarial=", adversarial));
          DriveResult run = Drive(kind, P, a, 4 * P + 7, 11, adversarial, /*eval_interval=*/5,
                                  /*warmup_steps=*/2);
          ASSERT_EQ(run.error, "");
          EXPECT_EQ(run.mispredicted, 0);
          // Not vacuous: PACI's stage 0 does cross steps here.
          if (!ScheduleTraitsOf(kind).flushes && P > 1) EXPECT_GT(run.max_drift[0], 0);
        }
      }
    }
  }
}

TEST(StageSchedulerTest, OutOfOrderGradientIsRejected) {
  StageSchedulerOptions o;
  o.num_stages = 3;
  o.stage = 1;
  o.accumulation = 2;
  o.total_steps = 5;
  StageScheduler st(o);
  ASSERT_TRUE(st.OnForward(0).ok());
  ASSERT_TRUE(st.OnForward(1).ok());
  auto result = st.OnBackward(1);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(result.status().message().find("oldest in flight is 0"), std::string::npos);
  EXPECT_FALSE(st.OnBackward(7).ok());
  EXPECT_FALSE(st.OnForward(1).ok()) << "a repeated micro-batch id must be refused";
}

TEST(StageSchedulerTest, ForwardBeyondInFlightLimitIsRejected) {
  StageSchedulerOptions o;
  o.num_stages = 4;
  o.stage = 2;  // limit P - s = 2
  o.total_steps = 5;
  StageScheduler st(o);
  ASSERT_TRUE(st.OnForward(0).ok());
  ASSERT_TRUE(st.OnForward(1).ok());
  EXPECT_EQ(st.Next(false, true), StageAction::kWait);
  EXPECT_EQ(st.OnForward(2).code(), absl::StatusCode::kFailedPrecondition);
}

TEST(StageSchedulerTest, EveryStepCoversTheNextAMicroBatches) {
  StageSchedulerOptions o;
  o.num_stages = 1;
  o.accumulation = 3;
  o.total_steps = 2;
  StageScheduler st(o);
  std::vector<uint64_t> stepped_after;
  for (int i = 0; i < 6; ++i) {
    ASSERT_EQ(st.Next(false, false), StageAction::kForward);
    ASSERT_TRUE(st.OnForward(st.next_micro_batch()).ok());
    ASSERT_EQ(st.Next(false, false), StageAction::kBackward);
    auto r = st.OnBackward(i);
    ASSERT_TRUE(r.ok());
    if (r->step_now) stepped_after.push_back(i);
    if (i == 2) {
      EXPECT_EQ(st.version(), 1);
    }
  }
  EXPECT_EQ(stepped_after, (std::vector<uint64_t>{2, 5}));
  EXPECT_EQ(st.Next(false, false), StageAction::kDrained);
  st.OnDrainHandled();
  EXPECT_EQ(st.Next(false, false), StageAction::kDone);
}

// A job resumed at its last step trains nothing: it drains at once, evaluates the weights it
// resumed and saves no checkpoint of them again.
TEST(StageSchedulerTest, ResumedCompleteItEvaluatesOnceAndSavesNothing) {
  StageSchedulerOptions o;
  o.num_stages = 2;
  o.accumulation = 4;
  o.total_steps = 10;
  o.start_step = 10;
  o.eval_interval = 3;
  o.checkpoint_interval = 5;
  o.evaluates = true;
  o.checkpoints = true;
  StageScheduler st(o);
  EXPECT_EQ(st.Next(false, false), StageAction::kDrained);
  EXPECT_EQ(st.drained_step(), 10);
  EXPECT_TRUE(st.drain_work().evaluate);
  EXPECT_FALSE(st.drain_work().checkpoint);
  st.OnDrainHandled();
  EXPECT_EQ(st.Next(false, false), StageAction::kDone);
  EXPECT_EQ(st.forwards(), 40);  // no forward past the 10 x 4 it resumed at
  // The replicas that do not speak for the stage evaluate nothing there either.
  o.evaluates = false;
  EXPECT_FALSE(StageScheduler(o).drain_work().evaluate);
}

TEST(StageSchedulerTest, ResumeStartsAtTheCheckpointedStepAndMicroBatch) {
  StageSchedulerOptions o;
  o.num_stages = 2;
  o.accumulation = 4;
  o.total_steps = 10;
  o.start_step = 6;
  StageScheduler st(o);
  EXPECT_EQ(st.version(), 6);
  EXPECT_EQ(st.next_micro_batch(), 24u);
  EXPECT_EQ(st.Next(false, false), StageAction::kForward);
}

}  // namespace
}  // namespace paci
