#include "worker/runtime/nccl_placement.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>

namespace paci {
namespace {

// Stage 1 of a three-stage job, stage s on devices[s] at addresses[s].
v1::StageAssignment Assignment(const std::vector<std::string>& devices,
                               const std::vector<std::string>& addresses) {
  v1::StageAssignment assignment;
  assignment.mutable_spec()->mutable_pipeline()->set_num_stages(3);
  for (const std::string& device : devices) {
    assignment.mutable_spec()->mutable_runtime()->add_stage_devices(device);
  }
  for (const std::string& address : addresses) assignment.add_stage_addresses(address);
  assignment.set_stage(1);
  return assignment;
}

const std::vector<std::string> kOneHost = {"10.0.0.1:7001", "10.0.0.1:7002", "10.0.0.1:7003"};

TEST(NcclPlacementTest, TwoGpusOfOneHost) {
  const auto assignment = Assignment({"cuda:0", "cuda:1", "cuda:2"}, kOneHost);
  EXPECT_TRUE(NcclWithPeer(assignment, 0));
  EXPECT_TRUE(NcclWithPeer(assignment, 2));
}

TEST(NcclPlacementTest, NotWithTheCpu) {
  EXPECT_FALSE(NcclWithPeer(Assignment({"cpu", "cuda:1", "cuda:2"}, kOneHost), 0));
  EXPECT_FALSE(NcclWithPeer(Assignment({"cuda:0", "cpu", "cuda:2"}, kOneHost), 0));
  EXPECT_FALSE(NcclWithPeer(Assignment({}, kOneHost), 0));  // runtime.device: cpu
}

TEST(NcclPlacementTest, NotOnOneGpu) {
  EXPECT_FALSE(NcclWithPeer(Assignment({"cuda:1", "cuda:1", "cuda:2"}, kOneHost), 0));
  // A bare "cuda" is the first GPU.
  EXPECT_FALSE(NcclWithPeer(Assignment({"cuda", "cuda:0", "cuda:2"}, kOneHost), 0));
  EXPECT_TRUE(NcclWithPeer(Assignment({"cuda", "cuda:1", "cuda:2"}, kOneHost), 0));
}

TEST(NcclPlacementTest, NotAcrossHosts) {
  const auto assignment = Assignment({"cuda:0", "cuda:1", "cuda:2"},
                                     {"10.0.0.1:7001", "10.0.0.2:7002", "10.0.0.2:7003"});
  EXPECT_FALSE(NcclWithPeer(assignment, 0));
  EXPECT_TRUE(NcclWithPeer(assignment, 2));
}

TEST(NcclPlacementTest, HostsAreComparedWithoutTheirPorts) {
  const auto assignment =
      Assignment({"cuda:0", "cuda:1", "cuda:2"}, {"[::1]:7001", "[::1]:7002", "[::2]:7002"});
  EXPECT_TRUE(NcclWithPeer(assignment, 0));
  EXPECT_FALSE(NcclWithPeer(assignment, 2));
}

TEST(NcclPlacementTest, EachReplicaUsesItsOwnDevices) {
  // Two replicas, one device per stage of each: replica 1's stages are on cuda:3 .. cuda:5.
  auto assignment = Assignment({"cuda:0", "cuda:1", "cuda:2", "cuda:3", "cuda:3", "cuda:5"},
                               kOneHost);
  assignment.mutable_spec()->mutable_pipeline()->set_data_parallel(2);
  EXPECT_TRUE(NcclWithPeer(assignment, 0));  // replica 0: cuda:1 with cuda:0
  assignment.set_replica(1);
  EXPECT_FALSE(NcclWithPeer(assignment, 0));  // replica 1: stages 0 and 1 share cuda:3
  EXPECT_TRUE(NcclWithPeer(assignment, 2));   // cuda:3 with cuda:5
}

TEST(NcclPlacementTest, OnlyWithAStageOfTheJob) {
  const auto assignment = Assignment({"cuda:0", "cuda:1", "cuda:2"}, kOneHost);
  EXPECT_FALSE(NcclWithPeer(assignment, -1));
  EXPECT_FALSE(NcclWithPeer(assignment, 3));
}

}  // namespace
}  // namespace paci
