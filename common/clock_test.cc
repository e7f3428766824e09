#include "common/clock.h"

#include <chrono>
#include <future>

#include <gtest/gtest.h>

namespace paci {
namespace {

TEST(SteadyClockTest, AStepOfTheSystemClockMovesNoDuration) {
  absl::Time wall = absl::FromUnixSeconds(1'800'000'000);
  absl::Duration steady = absl::Seconds(5);
  const std::unique_ptr<Clock> clock = Clock::Steady([&] { return wall; }, [&] { return steady; });
  const absl::Time start = clock->Now();
  EXPECT_EQ(start, absl::FromUnixSeconds(1'800'000'000));  // a wall time
  // The system clock jumps an hour ahead, then two hours back; one second passes.
  wall += absl::Hours(1);
  steady += absl::Milliseconds(400);
  EXPECT_EQ(clock->Now() - start, absl::Milliseconds(400));
  wall -= absl::Hours(2);
  steady += absl::Milliseconds(600);
  EXPECT_EQ(clock->Now() - start, absl::Seconds(1));
}

TEST(SteadyClockTest, TheRealClockWaitsOutADeadlineAndWakesForACondition) {
  Clock& clock = Clock::Real();
  absl::Mutex mutex;
  bool flag = false;
  absl::MutexLock lock(&mutex);
  const absl::Time before = clock.Now();
  EXPECT_FALSE(clock.AwaitWithDeadline(mutex, absl::Condition(&flag), before + absl::Milliseconds(50)));
  EXPECT_GE(clock.Now(), before + absl::Milliseconds(50));  // never early
  flag = true;
  EXPECT_TRUE(clock.AwaitWithDeadline(mutex, absl::Condition(&flag), absl::InfiniteFuture()));
}

TEST(FakeClockTest, TimeMovesOnlyWhenAdvanced) {
  FakeClock clock(absl::FromUnixSeconds(100));
  EXPECT_EQ(clock.Now(), absl::FromUnixSeconds(100));
  clock.Advance(absl::Milliseconds(1500));
  EXPECT_EQ(clock.Now(), absl::FromUnixSeconds(100) + absl::Milliseconds(1500));
}

TEST(FakeClockTest, APassedDeadlineAndAHeldConditionReturnAtOnce) {
  FakeClock clock;
  absl::Mutex mutex;
  bool flag = false;
  absl::MutexLock lock(&mutex);
  EXPECT_FALSE(clock.AwaitWithDeadline(mutex, absl::Condition(&flag), clock.Now()));
  flag = true;
  EXPECT_TRUE(clock.AwaitWithDeadline(mutex, absl::Condition(&flag), absl::InfiniteFuture()));
}

TEST(FakeClockTest, AdvanceWakesAWaiterOnlyOnceItsDeadlinePasses) {
  FakeClock clock;
  absl::Mutex mutex;
  bool flag = false;
  const absl::Time deadline = clock.Now() + absl::Seconds(10);
  std::future<bool> waited = std::async(std::launch::async, [&] {
    absl::MutexLock lock(&mutex);
    return clock.AwaitWithDeadline(mutex, absl::Condition(&flag), deadline);
  });
  ASSERT_TRUE(clock.BlockUntilWaiters(1));
  clock.Advance(absl::Seconds(9));
  ASSERT_TRUE(clock.BlockUntilWaiters(1));  // still waiting: one second to go
  EXPECT_EQ(waited.wait_for(std::chrono::milliseconds(0)), std::future_status::timeout);
  clock.Advance(absl::Seconds(1));
  ASSERT_EQ(waited.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_FALSE(waited.get());
}

TEST(FakeClockTest, AConditionMadeTrueWakesAWaiterWithoutTimeMoving) {
  FakeClock clock;
  absl::Mutex mutex;
  bool flag = false;
  std::future<bool> waited = std::async(std::launch::async, [&] {
    absl::MutexLock lock(&mutex);
    return clock.AwaitWithDeadline(mutex, absl::Condition(&flag), absl::InfiniteFuture());
  });
  ASSERT_TRUE(clock.BlockUntilWaiters(1));
  {
    absl::MutexLock lock(&mutex);
    flag = true;
  }
  ASSERT_EQ(waited.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_TRUE(waited.get());
}

TEST(RealClockTest, WaitsOutItsDeadline) {
  Clock& clock = Clock::Real();
  absl::Mutex mutex;
  bool flag = false;
  const absl::Time start = clock.Now();
  absl::MutexLock lock(&mutex);
  EXPECT_FALSE(
      clock.AwaitWithDeadline(mutex, absl::Condition(&flag), start + absl::Milliseconds(20)));
  EXPECT_GE(clock.Now() - start, absl::Milliseconds(20));
}

}  // namespace
}  // namespace paci
