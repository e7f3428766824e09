#include "common/backoff.h"

#include <gtest/gtest.h>

namespace paci {
namespace {

TEST(BackoffTest, DoublesUpToTheMaximumAndResets) {
  Backoff backoff(absl::Milliseconds(100), absl::Milliseconds(500));
  EXPECT_EQ(backoff.current(), absl::Milliseconds(100));
  EXPECT_EQ(backoff.Next(), absl::Milliseconds(100));
  EXPECT_EQ(backoff.Next(), absl::Milliseconds(200));
  EXPECT_EQ(backoff.Next(), absl::Milliseconds(400));
  EXPECT_EQ(backoff.Next(), absl::Milliseconds(500));  // capped
  EXPECT_EQ(backoff.Next(), absl::Milliseconds(500));
  backoff.Reset();
  EXPECT_EQ(backoff.Next(), absl::Milliseconds(100));
}

TEST(BackoffTest, AfterFailuresIsTheSameRuleWithoutState) {
  const absl::Duration base = absl::Milliseconds(200), max = absl::Seconds(60);
  EXPECT_EQ(Backoff::After(base, max, 0), absl::Milliseconds(200));
  EXPECT_EQ(Backoff::After(base, max, 3), absl::Milliseconds(1600));
  EXPECT_EQ(Backoff::After(base, max, 9), max);  // 102.4 s, capped
  EXPECT_EQ(Backoff::After(base, max, 1 << 30), max);  // the exponent is capped: no overflow
  Backoff stateful(base, max);
  for (int failures = 0; failures < 12; ++failures) {
    EXPECT_EQ(stateful.Next(), Backoff::After(base, max, failures)) << failures;
  }
}

}  // namespace
}  // namespace paci
