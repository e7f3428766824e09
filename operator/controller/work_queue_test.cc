#include "operator/controller/work_queue.h"

#include <chrono>
#include <future>

#include <gtest/gtest.h>

#include "common/clock.h"

namespace paci::op {
namespace {

// The queue's delays are timed by a FakeClock: the tests move time on
// instead of sleeping, and see a key handed out not a nanosecond early.
class DelayedWorkQueueTest : public ::testing::Test {
 protected:
  // Get on another thread; "" once the queue is shut down.
  std::future<std::string> GetAsync() {
    return std::async(std::launch::async, [this] {
      std::string key;
      return queue_.Get(&key) ? key : std::string();
    });
  }

  // A worker waiting in Get is handed `key` once the clock has moved on by
  // `delay`, and not before.
  void ExpectHandedOutAfter(absl::Duration delay, const std::string& key) {
    std::future<std::string> got = GetAsync();
    ASSERT_TRUE(clock_.BlockUntilWaiters(1));
    clock_.Advance(delay - absl::Nanoseconds(1));
    EXPECT_EQ(got.wait_for(std::chrono::seconds(0)), std::future_status::timeout);
    clock_.Advance(absl::Nanoseconds(1));
    ASSERT_EQ(got.wait_for(std::chrono::seconds(10)), std::future_status::ready);
    EXPECT_EQ(got.get(), key);
    queue_.Done(key);
  }

  FakeClock clock_;
  WorkQueue queue_{WorkQueue::Options{absl::Milliseconds(10), absl::Seconds(1), &clock_}};
};

TEST(WorkQueueTest, AKeyAddedTwiceIsQueuedOnce) {
  WorkQueue queue;
  queue.Add("ns/a");
  queue.Add("ns/a");
  queue.Add("ns/b");
  EXPECT_EQ(queue.Depth(), 2u);
  std::string key;
  ASSERT_TRUE(queue.Get(&key));
  EXPECT_EQ(key, "ns/a");
  queue.Done(key);
  ASSERT_TRUE(queue.Get(&key));
  EXPECT_EQ(key, "ns/b");
  queue.Done(key);
  EXPECT_EQ(queue.Depth(), 0u);
}

TEST(WorkQueueTest, AKeyAddedWhileProcessedIsHandedOutAgainOnlyAfterDone) {
  WorkQueue queue;
  queue.Add("ns/a");
  std::string key;
  ASSERT_TRUE(queue.Get(&key));
  queue.Add("ns/a");
  EXPECT_EQ(queue.Depth(), 0u);  // not to a second worker while the first has it
  queue.Done("ns/a");
  EXPECT_EQ(queue.Depth(), 1u);
}

TEST_F(DelayedWorkQueueTest, DelayedKeyArrivesAfterItsDelay) {
  queue_.AddAfter("ns/a", absl::Milliseconds(100));
  EXPECT_EQ(queue_.Depth(), 0u);
  ExpectHandedOutAfter(absl::Milliseconds(100), "ns/a");
}

TEST_F(DelayedWorkQueueTest, AKeyDelayedWhileAWorkerWaitsIsHandedOutWhenDue) {
  std::future<std::string> got = GetAsync();
  ASSERT_TRUE(clock_.BlockUntilWaiters(1));  // waiting for any key, with none delayed
  queue_.AddAfter("ns/a", absl::Seconds(2));
  clock_.Advance(absl::Seconds(2));
  ASSERT_EQ(got.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(got.get(), "ns/a");
}

TEST_F(DelayedWorkQueueTest, OnlyTheEarliestDelayOfAKeyCounts) {
  queue_.AddAfter("ns/a", absl::Seconds(5));
  queue_.AddAfter("ns/a", absl::Seconds(1));
  queue_.AddAfter("ns/a", absl::Seconds(3));
  ExpectHandedOutAfter(absl::Seconds(1), "ns/a");
  clock_.Advance(absl::Seconds(10));
  std::future<std::string> got = GetAsync();
  ASSERT_TRUE(clock_.BlockUntilWaiters(1));  // not handed out again for the later delays
  queue_.ShutDown();
  EXPECT_EQ(got.get(), "");
}

TEST_F(DelayedWorkQueueTest, FailuresBackOffExponentiallyUntilForgotten) {
  // 10ms * 2^failures: 10, 20, 40, then 80ms.
  for (int failures = 0; failures < 4; ++failures) {
    queue_.AddRateLimited("ns/a");
    ExpectHandedOutAfter(absl::Milliseconds(10) * (1 << failures), "ns/a");
  }
  EXPECT_EQ(queue_.Failures("ns/a"), 4);
  queue_.Forget("ns/a");
  EXPECT_EQ(queue_.Failures("ns/a"), 0);
  queue_.AddRateLimited("ns/a");
  ExpectHandedOutAfter(absl::Milliseconds(10), "ns/a");
}

TEST_F(DelayedWorkQueueTest, BackoffStopsAtTheMaximumDelay) {
  for (int failures = 0; failures < 8; ++failures) queue_.AddRateLimited("ns/a");
  EXPECT_EQ(queue_.Failures("ns/a"), 8);
  // The first of them (10ms) is what counts; the next is 10ms * 2^8, past the 1s maximum.
  ExpectHandedOutAfter(absl::Milliseconds(10), "ns/a");
  queue_.AddRateLimited("ns/a");
  ExpectHandedOutAfter(absl::Seconds(1), "ns/a");
}

TEST_F(DelayedWorkQueueTest, ShutDownWakesAWaitingWorker) {
  std::future<std::string> got = GetAsync();
  ASSERT_TRUE(clock_.BlockUntilWaiters(1));  // an empty queue keeps the worker waiting...
  queue_.ShutDown();            // ...until it shuts down
  ASSERT_EQ(got.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_EQ(got.get(), "");
}

}  // namespace
}  // namespace paci::op
