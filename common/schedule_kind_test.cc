#include "common/schedule_kind.h"

#include <cmath>
#include <limits>
#include <set>
#include <string>

#include "gtest/gtest.h"

namespace paci {
namespace {

TEST(ScheduleKindTest, EveryKindRoundTripsThroughItsName) {
  for (ScheduleKind kind : {ScheduleKind::kPaci, ScheduleKind::kOneFOneBFlush,
                            ScheduleKind::kGpipe, ScheduleKind::kAsyncOneFOneB}) {
    const absl::StatusOr<ScheduleKind> parsed = ParseScheduleKind(ScheduleKindName(kind));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, kind);
  }
}

TEST(ScheduleKindTest, NamesAreTheSpecSpellings) {
  EXPECT_EQ(ScheduleKindName(ScheduleKind::kPaci), "paci");
  EXPECT_EQ(ScheduleKindName(ScheduleKind::kOneFOneBFlush), "1f1b-flush");
  EXPECT_EQ(ScheduleKindName(ScheduleKind::kGpipe), "gpipe");
  EXPECT_EQ(ScheduleKindName(ScheduleKind::kAsyncOneFOneB), "async-1f1b");
}

TEST(ScheduleKindTest, UnknownOrMiscasedNameIsInvalidArgument) {
  for (const char* name : {"", "PACI", "pipedream", "1f1b"}) {
    EXPECT_EQ(ParseScheduleKind(name).status().code(), absl::StatusCode::kInvalidArgument)
        << name;
  }
}

struct DriftCase {
  ScheduleKind kind;
  int num_stages;
  int stage;
  int accumulation;
  int64_t bound;
};

TEST(DriftBoundTest, MatchesCeilOfOvertakersOverAccumulationAndZeroForFlushingSchedules) {
  const DriftCase cases[] = {
      {ScheduleKind::kPaci, 4, 0, 1, 3},
      {ScheduleKind::kPaci, 4, 0, 2, 2},
      {ScheduleKind::kPaci, 4, 0, 3, 1},
      {ScheduleKind::kPaci, 4, 0, 4, 1},
      {ScheduleKind::kPaci, 4, 1, 2, 1},
      {ScheduleKind::kPaci, 4, 3, 1, 0},  // the last stage is never overtaken
      {ScheduleKind::kPaci, 1, 0, 1, 0},
      {ScheduleKind::kOneFOneBFlush, 4, 0, 1, 0},
      {ScheduleKind::kOneFOneBFlush, 4, 0, 4, 0},
      {ScheduleKind::kGpipe, 4, 0, 1, 0},
      {ScheduleKind::kGpipe, 8, 2, 3, 0},
      {ScheduleKind::kAsyncOneFOneB, 4, 1, 1, 2},
      {ScheduleKind::kAsyncOneFOneB, 4, 1, 8, 2},  // async-1f1b ignores a
      {ScheduleKind::kAsyncOneFOneB, 4, 3, 1, 0},
  };
  for (const DriftCase& c : cases) {
    EXPECT_EQ(DriftBound(c.kind, c.num_stages, c.stage, c.accumulation), c.bound)
        << ScheduleKindName(c.kind) << " P=" << c.num_stages << " s=" << c.stage
        << " a=" << c.accumulation;
  }
}

// The accumulation for a limit D is the smallest a whose drift at stage 0 is within D.
TEST(AccumulationForDriftLimitTest, IsTheSmallestAccumulationWithinTheLimit) {
  for (int P : {1, 2, 3, 4, 8, 16, 64}) {
    for (int D = 1; D <= 64; ++D) {
      const int a = AccumulationForDriftLimit(P, D);
      ASSERT_GE(a, 1) << "P=" << P << " D=" << D;
      EXPECT_LE(DriftBound(ScheduleKind::kPaci, P, 0, a), D) << "P=" << P << " D=" << D;
      if (a > 1) {
        EXPECT_GT(DriftBound(ScheduleKind::kPaci, P, 0, a - 1), D) << "P=" << P << " D=" << D;
      }
    }
  }
  EXPECT_EQ(AccumulationForDriftLimit(8, 1), 7);
  EXPECT_EQ(AccumulationForDriftLimit(8, 2), 4);
  EXPECT_EQ(AccumulationForDriftLimit(8, 7), 1);
  EXPECT_EQ(AccumulationForDriftLimit(1, 0), 1);  // one stage: nothing overtakes
  EXPECT_EQ(AccumulationForDriftLimit(4, 0), 0);  // a drift of 0 is the flush: no a gives it
}

// The schedule table, row by row: what a new row must satisfy.
TEST(ScheduleTableTest, EveryRowParsesFromItsNameAndBack) {
  std::set<std::string> names;
  for (size_t i = 0; i < Schedules().size(); ++i) {
    const ScheduleTraits& row = Schedules()[i];
    SCOPED_TRACE(row.name);
    EXPECT_EQ(row.kind, static_cast<ScheduleKind>(i)) << "rows follow ScheduleKind's order";
    EXPECT_EQ(&ScheduleTraitsOf(row.kind), &row);
    const absl::StatusOr<ScheduleKind> parsed = ParseScheduleKind(row.name);
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(*parsed, row.kind);
    EXPECT_EQ(ScheduleKindName(row.kind), row.name);
    EXPECT_TRUE(names.insert(row.name).second) << "two rows of one name";
    // Every rule is set: a rule a schedule lacks is one that accepts everything.
    EXPECT_TRUE(row.effective_accumulation != nullptr);
    EXPECT_TRUE(row.in_flight_limit != nullptr);
    EXPECT_TRUE(row.drift_bound != nullptr);
    EXPECT_TRUE(row.default_accumulation != nullptr);
    EXPECT_TRUE(row.check_accumulation != nullptr);
    EXPECT_TRUE(row.check_drift_limit != nullptr);
  }
  EXPECT_EQ(Schedules().front().name, std::string("paci")) << "the default comes first";
}

TEST(ScheduleTableTest, AnUnknownNameIsRefusedListingEveryRow) {
  const absl::StatusOr<ScheduleKind> parsed = ParseScheduleKind("pipedream");
  ASSERT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(parsed.status().message(),
            "unknown schedule \"pipedream\"; expected one of paci, 1f1b-flush, gpipe, async-1f1b");
  for (const ScheduleTraits& row : Schedules()) {
    EXPECT_NE(std::string(parsed.status().message()).find(row.name), std::string::npos)
        << row.name;
  }
  EXPECT_EQ(ScheduleNames(kEverySchedule, ", "), "paci, 1f1b-flush, gpipe, async-1f1b");
  EXPECT_EQ(ScheduleNames(ScheduleBit(ScheduleKind::kPaci) | ScheduleBit(ScheduleKind::kGpipe),
                          " or "),
            "paci or gpipe");
}

// DriftBound is the row's; a flushing row never drifts; an asynchronous one at
// most the P-1-s micro-batches that can be ahead, none at the last stage, and
// never more at a stage than at the one before it. (That the scheduler keeps
// each row's bound, and reaches it, is stage_scheduler_test's.)
TEST(ScheduleTableTest, EveryRowsDriftBoundIsWithinTheOvertakersAndZeroWhereItFlushes) {
  for (const ScheduleTraits& row : Schedules()) {
    for (int P = 1; P <= 8; ++P) {
      for (int a = 1; a <= 2 * P; ++a) {
        int64_t previous = P;
        for (int s = 0; s < P; ++s) {
          SCOPED_TRACE(std::string(row.name) + " P=" + std::to_string(P) +
                       " s=" + std::to_string(s) + " a=" + std::to_string(a));
          const int64_t bound = DriftBound(row.kind, P, s, a);
          EXPECT_EQ(bound, row.drift_bound(P, s, a));
          EXPECT_GE(bound, 0);
          EXPECT_LE(bound, P - 1 - s);
          EXPECT_LE(bound, previous);
          if (row.flushes) EXPECT_EQ(bound, 0);
          previous = bound;
          const int effective = row.effective_accumulation(a);
          EXPECT_GE(effective, 1);
          EXPECT_GE(row.in_flight_limit(P, s, effective), 1);
        }
      }
    }
  }
}

TEST(DriftCorrectionTableTest, EveryRowIsFoundByItsNameAndNoneIsTheDefaultForEverySchedule) {
  ASSERT_FALSE(DriftCorrections().empty());
  const DriftCorrectionTraits& none = DriftCorrections().front();
  EXPECT_EQ(std::string(none.name), "none");
  EXPECT_EQ(FindDriftCorrection(""), &none) << "left out, a spec corrects nothing";
  EXPECT_EQ(FindDriftCorrection("magic"), nullptr);
  EXPECT_EQ(FindDriftCorrection("Staleness"), nullptr);
  std::set<std::string> names;
  for (const DriftCorrectionTraits& row : DriftCorrections()) {
    SCOPED_TRACE(row.name);
    EXPECT_EQ(FindDriftCorrection(row.name), &row);
    EXPECT_TRUE(names.insert(row.name).second) << "two rows of one name";
    ASSERT_TRUE(row.gradient_weight != nullptr);
    ASSERT_TRUE(row.lr_factor != nullptr);
    // A correction only ever shrinks: weights and factors in (0, 1].
    for (int64_t d = 0; d <= 64; ++d) {
      EXPECT_GT(row.gradient_weight(d), 0);
      EXPECT_LE(row.gradient_weight(d), 1);
      EXPECT_GT(row.lr_factor(d), 0);
      EXPECT_LE(row.lr_factor(d), 1);
    }
    // No drift, nothing to correct.
    EXPECT_EQ(row.gradient_weight(0), 1.0);
    EXPECT_EQ(row.lr_factor(0), 1.0);
    // A prediction looks at most as far ahead as the backward is, never back.
    ASSERT_TRUE(row.prediction_steps != nullptr);
    for (int64_t d = 0; d <= 64; ++d) {
      EXPECT_GE(row.prediction_steps(d), 0);
      EXPECT_LE(row.prediction_steps(d), d);
    }
    EXPECT_GE(row.delay_compensation, 0);
    // A correction is for the drift: the flushing schedules, which have none, take only "none".
    if (&row != &none) {
      for (const ScheduleTraits& schedule : Schedules()) {
        if (schedule.flushes) EXPECT_FALSE(DriftCorrectionAllowed(row, schedule.kind));
      }
    }
  }
  EXPECT_EQ(FindDriftCorrection("predict")->prediction_steps(3), 3);
  // Every schedule's automatic default names a correction it takes, and a warm-up within
  // the run that only a drifting pipeline has.
  for (const ScheduleTraits& schedule : Schedules()) {
    SCOPED_TRACE(schedule.name);
    for (int P : {1, 2, 8}) {
      const DriftCorrectionTraits* automatic = FindDriftCorrection(schedule.default_correction(P));
      ASSERT_NE(automatic, nullptr);
      EXPECT_TRUE(DriftCorrectionAllowed(*automatic, schedule.kind));
      for (int a : {1, 4, 4096}) {
        for (int64_t steps : {int64_t{1}, int64_t{10}, int64_t{600},
                              std::numeric_limits<int64_t>::max()}) {
          const int64_t warmup = schedule.default_warmup_steps(P, a, steps);
          EXPECT_GE(warmup, 0);
          EXPECT_LE(warmup, steps / 2 + 1);  // at most half of the run, rounded up
          if (schedule.flushes || P == 1) EXPECT_EQ(warmup, 0);
        }
      }
    }
  }
  EXPECT_EQ(FindDriftCorrection("delay-comp")->delay_compensation, 2.0);
  for (const ScheduleTraits& schedule : Schedules()) {
    EXPECT_TRUE(DriftCorrectionAllowed(none, schedule.kind)) << schedule.name;
  }
  EXPECT_EQ(DriftCorrectionNames(), "none, staleness, stage-lr, predict or delay-comp");
}

TEST(DriftCorrectionTableTest, StalenessWeightsByDriftAndStageLrScalesByTheBound) {
  const DriftCorrectionTraits* staleness = FindDriftCorrection("staleness");
  const DriftCorrectionTraits* stage_lr = FindDriftCorrection("stage-lr");
  const DriftCorrectionTraits* none = FindDriftCorrection("none");
  ASSERT_NE(staleness, nullptr);
  ASSERT_NE(stage_lr, nullptr);
  ASSERT_NE(none, nullptr);
  for (int64_t d : {0, 1, 2, 7}) {
    EXPECT_DOUBLE_EQ(staleness->gradient_weight(d), 1.0 / (1.0 + d)) << d;
    EXPECT_EQ(staleness->lr_factor(d), 1.0) << d;
    EXPECT_EQ(stage_lr->gradient_weight(d), 1.0) << d;
    EXPECT_DOUBLE_EQ(stage_lr->lr_factor(d), 1.0 / std::sqrt(1.0 + d)) << d;
    EXPECT_EQ(none->gradient_weight(d), 1.0) << d;
    EXPECT_EQ(none->lr_factor(d), 1.0) << d;
  }
  // Both are PACI's: only paci takes them.
  for (const ScheduleTraits& schedule : Schedules()) {
    const bool paci = schedule.kind == ScheduleKind::kPaci;
    EXPECT_EQ(DriftCorrectionAllowed(*staleness, schedule.kind), paci) << schedule.name;
    EXPECT_EQ(DriftCorrectionAllowed(*stage_lr, schedule.kind), paci) << schedule.name;
  }
}

}  // namespace
}  // namespace paci
