// Leader election against a real kube-apiserver, timed by a FakeClock: the
// tests move the electors' time on instead of sleeping.

#include "operator/controller/leader_elector.h"

#include <atomic>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/clock.h"
#include "kube/test_api_server.h"

namespace paci::op {
namespace {

using nlohmann::json;

class LeaderElectorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.ok()) << "the API server did not start; see " << server_.log_path();
    options_.lease_namespace = "default";
    options_.clock = &clock_;
  }

  LeaderElector::Options Replica(const std::string& identity) {
    LeaderElector::Options options = options_;
    options.identity = identity;
    return options;
  }

  json Lease() {
    absl::StatusOr<json> lease = client_.Get(
        kube::CollectionPath("coordination.k8s.io", "v1", "default", "leases") + "/paci-operator");
    EXPECT_TRUE(lease.ok()) << lease.status();
    return lease.value_or(json::object());
  }

  // Wakes a started elector for its next try and waits until that try is
  // over (it waits on the clock again).
  void NextRetry() {
    const int64_t waits = clock_.waits_begun();
    clock_.Advance(options_.retry_period);
    ASSERT_TRUE(clock_.BlockUntilWaitsBegun(waits + 1));
  }

  kube::TestApiServer server_;
  kube::KubeClient client_{server_.client_options()};
  FakeClock clock_;
  LeaderElector::Options options_;
};

TEST_F(LeaderElectorTest, OnlyOneReplicaLeadsAndAnotherTakesOverAfterTheLeaseLapses) {
  options_.lease_duration = absl::Seconds(1);
  LeaderElector a(client_, Replica("replica-a"), nullptr, nullptr);
  LeaderElector b(client_, Replica("replica-b"), nullptr, nullptr);

  EXPECT_TRUE(a.TryAcquireOrRenew());
  EXPECT_FALSE(b.TryAcquireOrRenew());
  EXPECT_TRUE(a.TryAcquireOrRenew());  // renewing
  EXPECT_FALSE(b.TryAcquireOrRenew());
  // a stops renewing (it died): b takes over once b has seen no renewal for a
  // lease, by its own clock.
  clock_.Advance(absl::Milliseconds(999));
  EXPECT_FALSE(b.TryAcquireOrRenew());
  clock_.Advance(absl::Milliseconds(1));
  EXPECT_TRUE(b.TryAcquireOrRenew());
  EXPECT_FALSE(a.TryAcquireOrRenew());
  const json lease = Lease();
  EXPECT_EQ(lease["spec"]["holderIdentity"], "replica-b");
  EXPECT_EQ(lease["spec"]["leaseTransitions"], 1);
}

TEST_F(LeaderElectorTest, ALeaderThatCannotRenewStepsDownAfterTheRenewDeadline) {
  options_.retry_period = absl::Seconds(2);
  options_.renew_deadline = absl::Seconds(10);
  std::atomic<int> started{0};
  std::atomic<int> stopped{0};
  LeaderElector elector(
      client_, Replica("replica-a"), [&] { ++started; }, [&] { ++stopped; });
  elector.Start();
  ASSERT_TRUE(clock_.BlockUntilWaitsBegun(1));  // the first try is over
  EXPECT_TRUE(elector.IsLeader());
  EXPECT_EQ(started, 1);

  // The next five renewals fail: four retry periods (8 s) without one is
  // still within the renew deadline; the fifth, at 10 s, finds it reached.
  ASSERT_TRUE(server_.Control("inject-error", {{"verb", "update"}, {"resource", "leases"}, {"code", 500},
                                   {"count", 5}}));
  for (int retry = 1; retry <= 4; ++retry) {
    NextRetry();
    EXPECT_TRUE(elector.IsLeader()) << "after " << retry << " failed renewals";
  }
  NextRetry();
  EXPECT_FALSE(elector.IsLeader());
  EXPECT_EQ(stopped, 1);

  // The API server answers again: it leads again.
  NextRetry();
  EXPECT_TRUE(elector.IsLeader());
  EXPECT_EQ(started, 2);
  elector.Stop();
}

TEST_F(LeaderElectorTest, ARenewalTheServerDoesNotAnswerEndsTheLeadAtTheRenewDeadline) {
  options_.retry_period = absl::Seconds(2);
  options_.renew_deadline = absl::Seconds(10);
  std::atomic<int> stopped{0};
  LeaderElector elector(client_, Replica("replica-a"), nullptr, [&] { ++stopped; });
  elector.Start();
  ASSERT_TRUE(clock_.BlockUntilWaitsBegun(1));  // renewed at 0 s
  ASSERT_TRUE(elector.IsLeader());

  // At 2 s the renewal's update reaches a server that does not answer.
  ASSERT_TRUE(server_.Control("hold", {{"verb", "update"}, {"resource", "leases"}}));
  const int64_t waits = clock_.waits_begun();
  clock_.Advance(absl::Seconds(2));
  ASSERT_EQ(server_.HeldRequests(/*at_least=*/1), 1) << "the renewal never reached the server";
  clock_.Advance(absl::Milliseconds(7999));
  EXPECT_TRUE(elector.IsLeader());  // 9.999 s after the last renewal began
  clock_.Advance(absl::Milliseconds(1));
  // 10 s: no longer, by itself, though its thread still waits for the answer
  // (another replica may take the lease 15 s after it last saw it renewed).
  EXPECT_FALSE(elector.IsLeader());
  EXPECT_EQ(stopped, 0);

  // The answer comes at 12 s, past that renewal's own deadline (2 s + 10 s):
  // it does not count, and the elector steps down.
  clock_.Advance(absl::Seconds(2));
  ASSERT_TRUE(server_.Control("release"));
  ASSERT_TRUE(clock_.BlockUntilWaitsBegun(waits + 1));
  EXPECT_FALSE(elector.IsLeader());
  EXPECT_EQ(stopped, 1);
  elector.Stop();
}

TEST(LeaderElectorOptionsTest, TheRetryRenewAndLeaseTimesMustBeInThatOrder) {
  LeaderElector::Options options;  // 2 s, 10 s, 15 s
  EXPECT_TRUE(LeaderElector::Validate(options).ok());
  options.renew_deadline = absl::Seconds(15);
  EXPECT_THAT(LeaderElector::Validate(options).message(),
              ::testing::HasSubstr("the renew deadline (15s) must be shorter than the lease duration (15s)"));
  options.renew_deadline = absl::Seconds(2);
  EXPECT_THAT(LeaderElector::Validate(options).message(),
              ::testing::HasSubstr("the retry period (2s) must be shorter than the renew deadline (2s)"));
  options.retry_period = absl::ZeroDuration();
  EXPECT_EQ(LeaderElector::Validate(options).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(LeaderElectorTest, StoppingReleasesTheLeaseForAnotherReplicaAtOnce) {
  std::atomic<int> stopped{0};
  LeaderElector a(client_, Replica("replica-a"), nullptr, [&] { ++stopped; });
  a.Start();
  ASSERT_TRUE(clock_.BlockUntilWaitsBegun(1));
  ASSERT_TRUE(a.IsLeader());
  a.Stop();  // wakes it from its wait without the clock moving
  EXPECT_FALSE(a.IsLeader());
  EXPECT_EQ(stopped, 1);
  EXPECT_EQ(Lease()["spec"]["holderIdentity"], "");

  LeaderElector b(client_, Replica("replica-b"), nullptr, nullptr);
  EXPECT_TRUE(b.TryAcquireOrRenew());  // no lease to wait out
}

}  // namespace
}  // namespace paci::op
