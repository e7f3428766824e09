#include "worker/pipeline/pipeline_simulator.h"

#include <random>

#include "gtest/gtest.h"

namespace paci {
namespace {

PipelineSimulatorOptions Equal(ScheduleKind kind, int P, int a, int64_t steps, double forward = 1,
                               double backward = 2) {
  PipelineSimulatorOptions o;
  o.schedule = kind;
  o.num_stages = P;
  o.accumulation = a;
  o.steps = steps;
  o.costs = {StageCosts{forward, backward, 0, 0}};
  return o;
}

TEST(PipelineSimulatorTest, FlushSchedulesUtilizationIsMOverMPlusPMinusOneWithEqualStageCosts) {
  for (ScheduleKind kind : {ScheduleKind::kOneFOneBFlush, ScheduleKind::kGpipe}) {
    for (int P : {1, 2, 3, 4, 8, 16, 64}) {
      for (int m : {1, 2, 3, 4, 8, 16}) {
        for (auto [forward, backward] : {std::pair{1.0, 2.0}, std::pair{1.0, 1.0}}) {
          absl::StatusOr<PipelineSimulation> sim =
              SimulatePipeline(Equal(kind, P, m, 5, forward, backward));
          ASSERT_TRUE(sim.ok()) << sim.status();
          SCOPED_TRACE(ScheduleKindName(kind) + " P=" + std::to_string(P) +
                       " m=" + std::to_string(m));
          const double expected = static_cast<double>(m) / (m + P - 1);
          EXPECT_DOUBLE_EQ(sim->seconds, 5 * (m + P - 1) * (forward + backward));
          for (int s = 0; s < P; ++s) {
            EXPECT_DOUBLE_EQ(sim->stages[s].utilization, expected) << "stage " << s;
            EXPECT_DOUBLE_EQ(sim->stages[s].idle_fraction, 1 - expected) << "stage " << s;
            EXPECT_EQ(sim->stages[s].drift_max, 0);
          }
        }
      }
    }
  }
}

TEST(PipelineSimulatorTest, PaciDriftNeverExceedsTheBoundWithUnevenStagesAndSlowLinks) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> cost(0.2, 3.0);
  for (int P : {2, 3, 4, 8, 16, 32, 64}) {
    for (int a : {1, 2, P - 1, P, 2 * P}) {
      if (a < 1) continue;
      PipelineSimulatorOptions o = Equal(ScheduleKind::kPaci, P, a, 3 + 600 / (P * a));
      o.costs.clear();
      for (int s = 0; s < P; ++s) o.costs.push_back({cost(rng), cost(rng), cost(rng) / 4, 0});
      o.link_latency = cost(rng) / 2;
      absl::StatusOr<PipelineSimulation> sim = SimulatePipeline(o);
      ASSERT_TRUE(sim.ok()) << sim.status();
      for (int s = 0; s < P; ++s) {
        const StageSimulation& st = sim->stages[s];
        SCOPED_TRACE("P=" + std::to_string(P) + " a=" + std::to_string(a) +
                     " s=" + std::to_string(s));
        EXPECT_EQ(st.drift_bound, DriftBound(ScheduleKind::kPaci, P, s, a));
        EXPECT_LE(static_cast<int64_t>(st.drift_histogram.size()) - 1, st.drift_bound);
        EXPECT_LE(st.drift_max, st.drift_bound);
        int64_t counted = 0;
        for (int64_t n : st.drift_histogram) counted += n;
        EXPECT_EQ(counted, o.steps * a);
        EXPECT_EQ(st.optimizer_steps, o.steps);
        EXPECT_LE(st.max_in_flight, P - s);
      }
    }
  }
}

TEST(PipelineSimulatorTest, PaciKeepsADeepPipeFullAndReachesItsBound) {
  // P = 64 with a = P - 1 and many micro-batches: only the fill at the start
  // and the drain at the end are idle, (P - 1) of N + P - 1 slots.
  const int P = 64, a = 63;
  const int64_t steps = 100;
  absl::StatusOr<PipelineSimulation> sim = SimulatePipeline(Equal(ScheduleKind::kPaci, P, a, steps));
  ASSERT_TRUE(sim.ok()) << sim.status();
  const double N = static_cast<double>(steps) * a;
  for (int s = 0; s < P; ++s) {
    EXPECT_NEAR(sim->stages[s].utilization, N / (N + P - 1), 1e-9) << "stage " << s;
    EXPECT_EQ(sim->stages[s].drift_max, DriftBound(ScheduleKind::kPaci, P, s, a)) << "stage " << s;
    EXPECT_EQ(sim->stages[s].max_in_flight, P - s) << "stage " << s;
  }
  // The same pipe flushed every step idles (P - 1) / (m + P - 1) of the time.
  absl::StatusOr<PipelineSimulation> flush =
      SimulatePipeline(Equal(ScheduleKind::kOneFOneBFlush, P, a, steps));
  ASSERT_TRUE(flush.ok()) << flush.status();
  EXPECT_NEAR(flush->stages[0].idle_fraction, (P - 1.0) / (a + P - 1), 1e-9);
  EXPECT_GT(sim->micro_batches_per_second / flush->micro_batches_per_second, 1.9);
}

TEST(PipelineSimulatorTest, AsyncOneFOneBDriftReachesPMinusOneMinusS) {
  absl::StatusOr<PipelineSimulation> sim =
      SimulatePipeline(Equal(ScheduleKind::kAsyncOneFOneB, 8, 1, 50));
  ASSERT_TRUE(sim.ok()) << sim.status();
  for (int s = 0; s < 8; ++s) EXPECT_EQ(sim->stages[s].drift_max, 7 - s) << "stage " << s;
}

TEST(PipelineSimulatorTest, GpipeHoldsTheWholeGroupOfActivations) {
  absl::StatusOr<PipelineSimulation> sim = SimulatePipeline(Equal(ScheduleKind::kGpipe, 4, 8, 3));
  ASSERT_TRUE(sim.ok()) << sim.status();
  absl::StatusOr<PipelineSimulation> one_f_one_b =
      SimulatePipeline(Equal(ScheduleKind::kOneFOneBFlush, 4, 8, 3));
  ASSERT_TRUE(one_f_one_b.ok()) << one_f_one_b.status();
  for (int s = 0; s < 4; ++s) {
    EXPECT_EQ(sim->stages[s].max_in_flight, 8);
    EXPECT_EQ(one_f_one_b->stages[s].max_in_flight, 4 - s);
    EXPECT_GT(sim->stages[s].mean_in_flight, one_f_one_b->stages[s].mean_in_flight);
  }
}

TEST(PipelineSimulatorTest, EvaluationDrainsThePipeAndItsForwardsAreBusyTime) {
  PipelineSimulatorOptions o = Equal(ScheduleKind::kPaci, 2, 2, 10);
  o.costs = {StageCosts{1, 2, 0.5, 0.25}};
  o.eval_interval = 5;
  o.eval_micro_batches = 4;
  absl::StatusOr<PipelineSimulation> sim = SimulatePipeline(o);
  ASSERT_TRUE(sim.ok()) << sim.status();
  // 20 micro-batches, 10 steps, 2 validation passes of 4 forwards each.
  for (const StageSimulation& st : sim->stages) {
    EXPECT_DOUBLE_EQ(st.busy_seconds, 20 * 3 + 10 * 0.5 + 2 * 4 * 0.25);
  }
  PipelineSimulatorOptions no_eval = o;
  no_eval.eval_micro_batches = 0;
  absl::StatusOr<PipelineSimulation> without = SimulatePipeline(no_eval);
  ASSERT_TRUE(without.ok()) << without.status();
  EXPECT_GT(sim->seconds, without->seconds + 2 * 4 * 0.25);  // the drain at step 5 costs more
}

TEST(PipelineSimulatorTest, LinkLatencyStretchesTheFillAndDrain) {
  PipelineSimulatorOptions o = Equal(ScheduleKind::kOneFOneBFlush, 2, 1, 1);
  o.link_latency = 0.5;
  absl::StatusOr<PipelineSimulation> sim = SimulatePipeline(o);
  ASSERT_TRUE(sim.ok()) << sim.status();
  // forward 0, link, forward 1 + backward 1, link, backward 0.
  EXPECT_DOUBLE_EQ(sim->seconds, 1 + 0.5 + 3 + 0.5 + 2);
}

TEST(PipelineSimulatorTest, OptionsOutOfRangeAreRefusedNamingTheField) {
  PipelineSimulatorOptions o = Equal(ScheduleKind::kPaci, 2, 2, 10);
  o.num_stages = 0;
  EXPECT_NE(SimulatePipeline(o).status().message().find("num_stages"), std::string::npos);
  o = Equal(ScheduleKind::kPaci, 2, 0, 10);
  EXPECT_NE(SimulatePipeline(o).status().message().find("accumulation"), std::string::npos);
  o = Equal(ScheduleKind::kPaci, 3, 2, 10);
  o.costs = {StageCosts{}, StageCosts{}};
  EXPECT_EQ(SimulatePipeline(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = Equal(ScheduleKind::kPaci, 2, 2, 10, -1);
  EXPECT_NE(SimulatePipeline(o).status().message().find("costs"), std::string::npos);
  o = Equal(ScheduleKind::kPaci, 2, 2, 10);
  o.link_latency = -1;
  EXPECT_NE(SimulatePipeline(o).status().message().find("link_latency"), std::string::npos);
}

}  // namespace
}  // namespace paci
