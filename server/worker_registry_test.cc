#include "server/worker_registry.h"

#include "gtest/gtest.h"

namespace paci {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

v1::WorkerRegistration Registration(const std::string& id,
                                    std::map<std::string, std::string> labels = {}) {
  v1::WorkerRegistration r;
  r.set_worker_id(id);
  for (const auto& [k, v] : labels) (*r.mutable_labels())[k] = v;
  return r;
}

TEST(WorkerRegistryTest, AnIdConnectsOnce) {
  WorkerRegistry registry;
  ASSERT_TRUE(registry.Add(Registration("w0"), nullptr).ok());
  absl::StatusOr<WorkerRegistry::Worker*> again = registry.Add(Registration("w0"), nullptr);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(again.status().message().find("w0"), absl::string_view::npos);
  EXPECT_EQ(registry.size(), 1u);
}

TEST(WorkerLivenessTest, AWorkerNotHeardFromPastTheTimeoutIsSilent) {
  WorkerLiveness liveness;
  liveness.Add("w0", kT0);
  liveness.Add("w1", kT0);
  liveness.Touch("w1", kT0 + absl::Seconds(4));
  liveness.Touch("unknown", kT0);  // ignored
  EXPECT_EQ(liveness.Silent(kT0 + absl::Seconds(5), absl::Seconds(5)),
            std::vector<std::string>{});
  EXPECT_EQ(liveness.Silent(kT0 + absl::Seconds(6), absl::Seconds(5)),
            std::vector<std::string>{"w0"});
  liveness.Remove("w0");
  liveness.Touch("w0", kT0 + absl::Seconds(9));  // gone: not added back
  EXPECT_EQ(liveness.Silent(kT0 + absl::Seconds(20), absl::Seconds(5)),
            std::vector<std::string>{"w1"});
}

TEST(WorkerRegistryTest, SlotsKeepRegistrationOrderAndIdleness) {
  WorkerRegistry registry;
  for (const char* id : {"b", "a", "c"}) {
    ASSERT_TRUE(registry.Add(Registration(id, {{"zone", id}}), nullptr).ok());
  }
  registry.Assign("a", "job", 1, 0);
  std::vector<WorkerSlot> slots = registry.Slots();
  ASSERT_EQ(slots.size(), 3u);
  EXPECT_EQ(slots[0].worker_id, "b");
  EXPECT_EQ(slots[1].worker_id, "a");
  EXPECT_FALSE(slots[1].idle);
  EXPECT_EQ(slots[2].labels.at("zone"), "c");
  ASSERT_TRUE(registry.Remove("b").has_value());
  EXPECT_FALSE(registry.Remove("b").has_value());
  EXPECT_EQ(registry.Slots().front().worker_id, "a");
}

// The scheduler matches each worker's namespace (the gateway's, from its certificate) as
// its paci.dev/namespace label, whatever label of that name it registered with: a job
// asks for its own namespace there (AsPending), so it runs on its namespace's workers only.
TEST(WorkerRegistryTest, SlotsCarryTheWorkersNamespaceNotOneItClaims) {
  WorkerRegistry registry;
  ASSERT_TRUE(registry.Add(Registration("team-b.w0", {{"paci.dev/namespace", "team-a"}, {"zone", "z"}}),
                           nullptr, "team-b")
                  .ok());
  ASSERT_TRUE(registry.Add(Registration("plain"), nullptr).ok());
  std::vector<WorkerSlot> slots = registry.Slots();
  ASSERT_EQ(slots.size(), 2u);
  EXPECT_EQ(slots[0].labels.at("paci.dev/namespace"), "team-b");
  EXPECT_EQ(slots[0].labels.at("zone"), "z");
  EXPECT_EQ(slots[1].labels.at("paci.dev/namespace"), "");  // the jobs of no namespace
  EXPECT_EQ(registry.at("team-b.w0").name_space, "team-b");
}

TEST(WorkerRegistryTest, StoppingAJobTellsEachOfItsWorkersOnce) {
  WorkerRegistry registry;
  std::vector<std::string> told;
  for (const char* id : {"w0", "w1", "w2"}) {
    auto sender = [&told, id](const v1::CoordinatorMessage& m) {
      told.push_back(std::string(id) + ":" + m.stop().reason());
    };
    ASSERT_TRUE(registry.Add(Registration(id), sender).ok());
  }
  registry.Assign("w0", "job", 2, 0);
  registry.Assign("w1", "job", 2, 1);
  registry.Assign("w2", "other", 1, 0);
  auto messages = registry.StopJob("job", "cancelled");
  ASSERT_EQ(messages.size(), 2u);
  for (auto& [sender, message] : messages) {
    EXPECT_EQ(message.stop().attempt(), 2);
    sender(message);
  }
  EXPECT_EQ(told, (std::vector<std::string>{"w0:cancelled", "w1:cancelled"}));
  EXPECT_TRUE(registry.StopJob("job", "again").empty());  // already stopping
  const WorkerRegistry::Counts counts = registry.Count();
  EXPECT_EQ(counts.stopping, 2);
  EXPECT_EQ(counts.busy, 1);
  EXPECT_EQ(counts.idle, 0);
  EXPECT_TRUE(registry.Holds("job"));
  WorkerRegistry::Release(*registry.Find("w0"));
  WorkerRegistry::Release(*registry.Find("w1"));
  EXPECT_FALSE(registry.Holds("job"));
  EXPECT_EQ(registry.Count().idle, 2);
}

}  // namespace
}  // namespace paci
