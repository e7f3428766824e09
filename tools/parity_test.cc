#include "tools/parity.h"

#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace paci {
namespace {

using ::testing::HasSubstr;

// A run of two validation points, for the plot.
v1::RunSummary TwoPoints(const std::string& schedule, double first_loss, double first_seconds) {
  v1::RunSummary run;
  run.set_schedule(schedule);
  for (int i = 0; i < 2; ++i) {
    v1::LossPoint* point = run.add_validation_loss();
    point->set_step(25 * (i + 1));
    point->set_loss(first_loss - 0.5 * i);
    point->set_seconds(first_seconds * (i + 1));
  }
  return run;
}

// The figures as common/parity_test.cc's hand computation gives them.
ParityReport HandReport() {
  ParityReport report;
  report.job_name = "tiny";
  report.schedule = "paci";
  report.correction = "predict";
  report.num_stages = 2;
  report.steps = 100;
  report.global_batch = 24;
  report.warmup_steps = 10;
  ParitySeed one{1, 2.02, 2.0, 1.0, 1200, 1000, 1.5, std::nullopt};
  ParitySeed two{2, 1.98, 2.0, -1.0, 1200, 1000, 1.125, 1.2};
  report.seeds = {one, two};
  report.mean_gap_pct = 0.0;
  report.gap_spread_pct = 2.0;
  report.mean_job_loss = 2.0;
  report.mean_flush_loss = 2.0;
  report.throughput_ratio = 1.2;
  report.mean_speedup_75 = (1.5 + 1.125) / 2;
  return report;
}

TEST(ParityTableTest, OneRowPerSeedAndTheMeansUnder) {
  const std::string table = ParityTable(HandReport());
  EXPECT_THAT(table, HasSubstr("| 1 | 2.0200 | 2.0000 | +1.00% | 1200 | 1000 | 1.50x | not reached |"));
  EXPECT_THAT(table, HasSubstr("| 2 | 1.9800 | 2.0000 | -1.00% | 1200 | 1000 | 1.12x | 1.20x |"));
  EXPECT_THAT(table, HasSubstr("| mean | 2.0000 | 2.0000 | "));
  EXPECT_THAT(table, HasSubstr("(spread 2.00) | 1.20x the flush's | | 1.31x | not reached |"));
  EXPECT_THAT(table, HasSubstr("drift correction predict, warm-up 10 steps"));
  EXPECT_THAT(ParityJson(HandReport()), HasSubstr("\"mean_speedup_final\": null"));
  EXPECT_THAT(ParityJson(HandReport()), HasSubstr("\"speedup_final\": 1.2"));
}

TEST(ParityPlotTest, OneDataBlockPerRunAndOnePlotLineEach) {
  std::vector<ParityPair> pairs(2);
  pairs[0] = {1, TwoPoints("paci", 2.5, 2), TwoPoints("1f1b-flush", 2.4, 3)};
  pairs[1] = {2, TwoPoints("paci", 2.6, 2), TwoPoints("1f1b-flush", 2.4, 3)};
  const std::string data = ParityPlotData(pairs);
  EXPECT_THAT(data, HasSubstr("# paci seed 1\n2.000 2.500000\n4.000 2.000000\n"));
  EXPECT_THAT(data, HasSubstr("# 1f1b-flush seed 2\n3.000 2.400000\n"));
  const std::string script = ParityPlotScript(HandReport(), pairs, "p.dat", "p.png");
  EXPECT_THAT(script, HasSubstr("set output 'p.png'"));
  EXPECT_THAT(script, HasSubstr("'p.dat' index 3 "));
  EXPECT_THAT(script, ::testing::Not(HasSubstr("'p.dat' index 4 ")));
}

}  // namespace
}  // namespace paci
