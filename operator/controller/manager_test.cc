// The operator's manager: the leader-only runnable started and stopped with
// the lead, readiness, and the lead lost. Leader election against a real
// kube-apiserver, timed by a FakeClock.

#include "operator/controller/manager.h"

#include <atomic>
#include <memory>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/synchronization/notification.h"
#include "common/clock.h"
#include "kube/test_api_server.h"

namespace paci::op {
namespace {

// What the runnables of one manager did.
struct Record {
  std::atomic<int> started{0}, stopped{0};
  std::atomic<bool> ready{true};
};

class FakeRunnable final : public LeaderRunnable {
 public:
  FakeRunnable(Record& record, absl::Status start) : record_(record), start_(std::move(start)) {}
  absl::Status Start() override {
    if (start_.ok()) ++record_.started;
    return start_;
  }
  void Stop() override { ++record_.stopped; }
  bool Ready() const override { return record_.ready.load(); }

 private:
  Record& record_;
  const absl::Status start_;
};

// A manager's Run on its own thread, until Stop() (or it ends by itself).
class Running {
 public:
  explicit Running(Manager& manager)
      : thread_([this, &manager] {
          status_ = manager.Run([this](absl::Duration wait) {
            return stop_.WaitForNotificationWithTimeout(wait);
          });
          done_.Notify();
        }) {}
  ~Running() {
    if (!stop_.HasBeenNotified()) stop_.Notify();
    thread_.join();
  }
  absl::Status Stop() {
    stop_.Notify();
    return Wait();
  }
  // Its status, once Run has ended (within a minute).
  absl::Status Wait() {
    EXPECT_TRUE(done_.WaitForNotificationWithTimeout(absl::Minutes(1)));
    return status_;
  }
  bool Ended() const { return done_.HasBeenNotified(); }

 private:
  absl::Notification stop_, done_;
  absl::Status status_;
  std::thread thread_;
};

// Polls (for a minute at most) until `condition` holds.
template <typename Condition>
bool Eventually(Condition condition) {
  for (int i = 0; i < 6000; ++i) {
    if (condition()) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return false;
}

Manager::Options Fast() {
  Manager::Options options;
  options.poll_interval = absl::Milliseconds(5);
  return options;
}

TEST(ManagerTest, WithoutElectionTheRunnableRunsUntilAStopIsAsked) {
  Record record;
  std::atomic<int> leading{0};
  Manager::Options options = Fast();
  options.leading_changed = [&](bool now) { leading += now ? 1 : -1; };
  Manager manager(options, [&] { return std::make_unique<FakeRunnable>(record, absl::OkStatus()); });
  Running running(manager);
  ASSERT_TRUE(Eventually([&] { return manager.Leading(); }));
  EXPECT_EQ(record.started, 1);
  EXPECT_EQ(leading, 1);
  EXPECT_EQ(manager.Readiness(), std::make_pair(200, std::string("ok: leading")));
  record.ready = false;  // its caches not synced
  EXPECT_EQ(manager.Readiness(), std::make_pair(503, std::string("caches not synced")));
  EXPECT_TRUE(running.Stop().ok());
  EXPECT_EQ(record.stopped, 1);
  EXPECT_EQ(leading, 0) << "told it stopped leading, once";
  EXPECT_FALSE(manager.Leading());
  EXPECT_EQ(manager.Readiness(), std::make_pair(200, std::string("ok: standby")));
}

TEST(ManagerTest, ARunnableThatCannotStartEndsTheManagerWithItsError) {
  Record record;
  Manager manager(Fast(), [&] {
    return std::make_unique<FakeRunnable>(record, absl::UnavailableError("caches did not fill"));
  });
  Running running(manager);
  const absl::Status status = running.Wait();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(status.message(), "caches did not fill");
  EXPECT_FALSE(manager.Leading());
  EXPECT_EQ(record.stopped, 0);
}

class ManagerElectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.ok()) << "the API server did not start; see " << server_.log_path();
  }
  Manager::Options Replica(const std::string& identity) {
    Manager::Options options = Fast();
    options.lease_client = &client_;
    options.lease.lease_namespace = "default";
    options.lease.identity = identity;
    options.lease.clock = &clock_;  // retry 2 s, renew deadline 10 s, lease 15 s
    return options;
  }

  kube::TestApiServer server_;
  kube::KubeClient client_{server_.client_options()};
  FakeClock clock_;
};

// One replica leads and runs the runnable, the other stands by; the leader's
// stop gives the lease back and the other takes over at its next try; a
// leader whose renewals fail past the renew deadline ends with Aborted.
TEST_F(ManagerElectionTest, OnlyTheLeaderRunsTheRunnableAndLosingTheLeadEndsTheManager) {
  Record a_record, b_record;
  Manager a(Replica("replica-a"),
            [&] { return std::make_unique<FakeRunnable>(a_record, absl::OkStatus()); });
  Manager b(Replica("replica-b"),
            [&] { return std::make_unique<FakeRunnable>(b_record, absl::OkStatus()); });
  auto a_running = std::make_unique<Running>(a);
  ASSERT_TRUE(Eventually([&] { return a.Leading(); }));
  ASSERT_TRUE(clock_.BlockUntilWaitsBegun(1));  // a's first try is over
  const int64_t waits = clock_.waits_begun();
  Running b_running(b);
  ASSERT_TRUE(clock_.BlockUntilWaitsBegun(waits + 1));  // b tried, and waits
  EXPECT_FALSE(b.Leading());
  EXPECT_EQ(b.Readiness(), std::make_pair(200, std::string("ok: standby")));
  EXPECT_EQ(b_record.started, 0);

  // a stops: its runnable stops, the lease is given back, and b takes it at its next try.
  EXPECT_TRUE(a_running->Stop().ok());
  a_running.reset();
  EXPECT_EQ(a_record.stopped, 1);
  clock_.Advance(absl::Seconds(2));  // the retry period
  ASSERT_TRUE(Eventually([&] { return b.Leading(); }));
  EXPECT_EQ(b_record.started, 1);

  // b's renewals fail until its renew deadline passes: it ends, Aborted, its runnable stopped.
  ASSERT_TRUE(server_.Control("inject-error", {{"verb", "update"}, {"resource", "leases"},
                                               {"code", 500}, {"count", 100}}));
  for (int retry = 0; retry < 8 && !b_running.Ended(); ++retry) {
    const int64_t before = clock_.waits_begun();
    clock_.Advance(absl::Seconds(2));
    // The renewal is over when b waits again, or b's manager has ended (its elector stopped).
    ASSERT_TRUE(Eventually([&] { return clock_.waits_begun() > before || b_running.Ended(); }));
  }
  const absl::Status lost = b_running.Wait();
  EXPECT_EQ(lost.code(), absl::StatusCode::kAborted) << lost;
  EXPECT_THAT(std::string(lost.message()), ::testing::HasSubstr("lost the leader lease"));
  EXPECT_EQ(b_record.stopped, 1);
}

}  // namespace
}  // namespace paci::op
