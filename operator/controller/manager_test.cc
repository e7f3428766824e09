// The operator's manager: the leader-only runnable started and stopped with
// the lead, readiness, and the lead lost. Leader election against a real
// kube-apiserver, timed by a FakeClock.

#include "operator/controller/manager.h"

#include <atomic>
#include <functional>
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

// What a manager told of its lead (Options::leading_changed), as events to wait on.
struct Lead {
  absl::Notification started, stopped;
  std::atomic<int> level{0};  // +1 when it starts leading, -1 when it stops
  std::function<void(bool)> Callback() {
    return [this](bool leading) {
      level += leading ? 1 : -1;
      (leading ? started : stopped).Notify();
    };
  }
  bool AwaitStarted() { return started.WaitForNotificationWithTimeout(absl::Minutes(1)); }
};

Manager::Options Fast(Lead& lead) {
  Manager::Options options;
  options.poll_interval = absl::Milliseconds(5);
  options.leading_changed = lead.Callback();
  return options;
}

TEST(ManagerTest, WithoutElectionTheRunnableRunsUntilAStopIsAsked) {
  Record record;
  Lead lead;
  Manager manager(Fast(lead),
                  [&] { return std::make_unique<FakeRunnable>(record, absl::OkStatus()); });
  Running running(manager);
  ASSERT_TRUE(lead.AwaitStarted());
  EXPECT_TRUE(manager.Leading());
  EXPECT_EQ(record.started, 1);
  EXPECT_EQ(lead.level, 1);
  EXPECT_EQ(manager.Readiness(), std::make_pair(200, std::string("ok: leading")));
  record.ready = false;  // its caches not synced
  EXPECT_EQ(manager.Readiness(), std::make_pair(503, std::string("caches not synced")));
  EXPECT_TRUE(running.Stop().ok());
  EXPECT_EQ(record.stopped, 1);
  EXPECT_EQ(lead.level, 0) << "told it stopped leading, once";
  EXPECT_FALSE(manager.Leading());
  EXPECT_EQ(manager.Readiness(), std::make_pair(200, std::string("ok: standby")));
}

TEST(ManagerTest, ARunnableThatCannotStartEndsTheManagerWithItsError) {
  Record record;
  Lead lead;
  Manager manager(Fast(lead), [&] {
    return std::make_unique<FakeRunnable>(record, absl::UnavailableError("caches did not fill"));
  });
  Running running(manager);
  const absl::Status status = running.Wait();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(status.message(), "caches did not fill");
  EXPECT_FALSE(manager.Leading());
  EXPECT_EQ(record.stopped, 0);
  EXPECT_FALSE(lead.started.HasBeenNotified());
}

class ManagerElectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.ok()) << "the API server did not start; see " << server_.log_path();
  }
  Manager::Options Replica(const std::string& identity, Lead& lead) {
    Manager::Options options = Fast(lead);
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
  Lead a_lead, b_lead;
  Manager a(Replica("replica-a", a_lead),
            [&] { return std::make_unique<FakeRunnable>(a_record, absl::OkStatus()); });
  Manager b(Replica("replica-b", b_lead),
            [&] { return std::make_unique<FakeRunnable>(b_record, absl::OkStatus()); });
  auto a_running = std::make_unique<Running>(a);
  ASSERT_TRUE(a_lead.AwaitStarted());
  EXPECT_TRUE(a.Leading());
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
  EXPECT_EQ(a_lead.level, 0);
  clock_.Advance(absl::Seconds(2));  // the retry period
  ASSERT_TRUE(b_lead.AwaitStarted());
  EXPECT_TRUE(b.Leading());
  EXPECT_EQ(b_record.started, 1);

  // b's renewals fail from now on; past its renew deadline it no longer leads, and its
  // manager ends, Aborted, its runnable stopped.
  ASSERT_TRUE(server_.Control("inject-error", {{"verb", "update"}, {"resource", "leases"},
                                               {"code", 500}, {"count", 100}}));
  clock_.Advance(absl::Seconds(12));
  const absl::Status lost = b_running.Wait();
  EXPECT_EQ(lost.code(), absl::StatusCode::kAborted) << lost;
  EXPECT_THAT(std::string(lost.message()), ::testing::HasSubstr("lost the leader lease"));
  EXPECT_EQ(b_record.stopped, 1);
  EXPECT_EQ(b_lead.level, 0);
}

}  // namespace
}  // namespace paci::op
