#include "common/schedule_kind.h"

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

}  // namespace
}  // namespace paci
