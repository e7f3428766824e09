#include "operator/controller/work_queue.h"

#include <chrono>
#include <future>

#include <gtest/gtest.h>

namespace paci::op {
namespace {

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

TEST(WorkQueueTest, DelayedKeyArrivesAfterItsDelay) {
  WorkQueue queue;
  const absl::Time start = absl::Now();
  queue.AddAfter("ns/a", absl::Milliseconds(100));
  EXPECT_EQ(queue.Depth(), 0u);
  std::string key;
  ASSERT_TRUE(queue.Get(&key));
  EXPECT_EQ(key, "ns/a");
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));
}

TEST(WorkQueueTest, FailuresBackOffExponentiallyUntilForgotten) {
  WorkQueue queue(WorkQueue::Options{absl::Milliseconds(10), absl::Seconds(1)});
  std::string key;
  for (int i = 0; i < 3; ++i) {
    queue.AddRateLimited("ns/a");
    ASSERT_TRUE(queue.Get(&key));
    queue.Done(key);
  }
  EXPECT_EQ(queue.Failures("ns/a"), 3);
  // The fourth retry waits 10ms * 2^3 = 80ms.
  const absl::Time start = absl::Now();
  queue.AddRateLimited("ns/a");
  ASSERT_TRUE(queue.Get(&key));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(80));
  queue.Forget("ns/a");
  EXPECT_EQ(queue.Failures("ns/a"), 0);
}

TEST(WorkQueueTest, ShutDownWakesAWaitingWorker) {
  WorkQueue queue;
  std::future<bool> got = std::async(std::launch::async, [&] {
    std::string key;
    return queue.Get(&key);
  });
  // An empty queue keeps the worker waiting...
  EXPECT_EQ(got.wait_for(std::chrono::milliseconds(50)), std::future_status::timeout);
  queue.ShutDown();
  // ...until it shuts down.
  ASSERT_EQ(got.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  EXPECT_FALSE(got.get());
}

}  // namespace
}  // namespace paci::op
