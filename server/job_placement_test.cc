#include "server/job_placement.h"

#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/peer_identity.h"

namespace paci {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

const absl::Time kNow = absl::FromUnixSeconds(1'800'000'000);

// A job of P stages and R replicas in namespace team-a, selecting pool=cpu.
v1::Job Job(int stages, int replicas) {
  v1::Job job;
  job.set_name("kjv");
  job.mutable_spec()->set_name("kjv");
  job.mutable_spec()->mutable_pipeline()->set_num_stages(stages);
  job.mutable_spec()->mutable_pipeline()->set_data_parallel(replicas);
  job.mutable_spec()->mutable_run_policy()->set_priority(3);
  (*job.mutable_spec()->mutable_run_policy()->mutable_worker_selector())["pool"] = "cpu";
  (*job.mutable_labels())[kNamespaceLabel] = "team-a";
  return job;
}

// Workers w0, w1, ... of team-a, each with its own addresses.
WorkerRegistry Workers(int count) {
  WorkerRegistry registry;
  for (int w = 0; w < count; ++w) {
    v1::WorkerRegistration registration;
    registration.set_worker_id("w" + std::to_string(w));
    registration.set_link_address("10.0.0." + std::to_string(w) + ":7000");
    registration.set_metrics_address("10.0.0." + std::to_string(w) + ":9100");
    registration.set_store_address("10.0.0." + std::to_string(w) + ":7100");
    registration.set_pid(100 + w);
    EXPECT_TRUE(registry.Add(registration, [](const v1::CoordinatorMessage&) {}, "team-a").ok());
  }
  return registry;
}

TEST(JobPlacementTest, SlotsAreReplicaTimesStagesPlusStageWithinTheJobsRange) {
  const v1::JobSpec spec = Job(3, 2).spec();
  EXPECT_EQ(SlotOf(spec, 0, 0), 0);
  EXPECT_EQ(SlotOf(spec, 2, 1), 5);
  EXPECT_EQ(SlotOf(spec, 3, 0), -1);
  EXPECT_EQ(SlotOf(spec, 0, 2), -1);
  EXPECT_EQ(SlotOf(spec, -1, 0), -1);
  EXPECT_EQ(SlotName(spec, 5), "stage 2 replica 1");
  EXPECT_EQ(SlotName(Job(3, 1).spec(), 1), "stage 1");
}

// The queue's view: the job's selector, and its own namespace whatever the selector says.
TEST(JobPlacementTest, APendingJobAsksForItsOwnNamespaceWhateverItsSelectorSays) {
  v1::Job job = Job(2, 2);
  (*job.mutable_spec()->mutable_run_policy()->mutable_worker_selector())[kNamespaceLabel] =
      "team-b";
  const PendingJob pending = AsPending(job, 42);
  EXPECT_EQ(pending.name, "kjv");
  EXPECT_EQ(pending.priority, 3);
  EXPECT_EQ(pending.sequence, 42);
  EXPECT_EQ(pending.num_workers, 4);
  EXPECT_THAT(pending.selector,
              UnorderedElementsAre(Pair("pool", "cpu"), Pair(kNamespaceLabel, "team-a")));
}

TEST(JobPlacementTest, OnlyAWorkerTheJobCouldHaveBeenPlacedOnMayClaimIt) {
  const v1::Job job = Job(2, 1);
  EXPECT_TRUE(CheckMayRun(job, {{kNamespaceLabel, "team-a"}, {"pool", "cpu"}}).ok());
  const absl::Status stranger = CheckMayRun(job, {{kNamespaceLabel, "team-b"}, {"pool", "cpu"}});
  EXPECT_EQ(stranger.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(stranger.message()),
              HasSubstr("register.running.job_name: job \"kjv\" is not one this worker runs: its "
                        "certificate places it on the jobs of namespace team-b only"));
  const absl::Status unlabelled = CheckMayRun(job, {{"pool", "cpu"}});
  EXPECT_THAT(std::string(unlabelled.message()), HasSubstr("the jobs of no namespace only"));
  const absl::Status other_pool = CheckMayRun(job, {{kNamespaceLabel, "team-a"}, {"pool", "gpu"}});
  EXPECT_EQ(other_pool.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(other_pool.message()),
              HasSubstr("it does not carry the label pool as the job's run_policy.worker_selector "
                        "asks"));
}

TEST(JobPlacementTest, AnAttemptRecordsItsWorkersAndGetsANewSecret) {
  WorkerRegistry workers = Workers(4);
  JobState state;
  state.job = Job(2, 2);
  StartAttempt(state, workers, {"w2", "w0", "w3", "w1"}, kNow);
  EXPECT_EQ(state.status().attempt(), 1);
  ASSERT_EQ(state.status().stages_size(), 4);
  EXPECT_EQ(state.worker(0), "w2");
  EXPECT_EQ(state.status().stages(3).stage(), 1);
  EXPECT_EQ(state.status().stages(3).replica(), 1);
  EXPECT_EQ(state.status().stages(3).link_address(), "10.0.0.1:7000");
  EXPECT_EQ(state.status().stages(3).pid(), 101);
  EXPECT_EQ(state.stages.size(), 4u);
  EXPECT_EQ(state.stages[2].last_progress, kNow);
  EXPECT_EQ(state.trace.stages_size(), 4);
  EXPECT_EQ(state.link_secret.size(), 32u);
  const std::string first_secret = state.link_secret;
  StartAttempt(state, workers, {"w0", "w1", "w2", "w3"}, kNow + absl::Seconds(5));
  EXPECT_EQ(state.status().attempt(), 2);
  EXPECT_EQ(state.worker(0), "w0");
  EXPECT_NE(state.link_secret, first_secret);
  EXPECT_EQ(state.attempt_started, kNow + absl::Seconds(5));
}

// A worker hears its stage, its replica's addresses and, with replicas, where
// its stage's replicas meet under a key of this placement only; a second
// attempt resumes from the checkpoints.
TEST(JobPlacementTest, AnAssignmentCarriesItsReplicasAddressesAndAResumeOnARestart) {
  WorkerRegistry workers = Workers(4);
  JobState state;
  state.job = Job(2, 2);
  state.job.mutable_spec()->mutable_checkpoint()->set_directory("/ckpt");
  state.sequence = 9;
  StartAttempt(state, workers, {"w0", "w1", "w2", "w3"}, kNow);
  const v1::StageAssignment assignment = AssignmentFor(state, workers, 0xab, /*slot=*/3);
  EXPECT_EQ(assignment.job_name(), "kjv");
  EXPECT_EQ(assignment.stage(), 1);
  EXPECT_EQ(assignment.replica(), 1);
  EXPECT_THAT(assignment.stage_addresses(), ElementsAre("10.0.0.2:7000", "10.0.0.3:7000"));
  EXPECT_THAT(assignment.replica_addresses(), ElementsAre("10.0.0.1:7000", "10.0.0.3:7000"));
  EXPECT_EQ(assignment.replica_store_address(), "10.0.0.1:7100");
  EXPECT_EQ(assignment.replica_group(), "ab/9/kjv/1/stage-1");
  EXPECT_EQ(assignment.link_secret(), state.link_secret);
  EXPECT_FALSE(assignment.spec().checkpoint().resume());
  StartAttempt(state, workers, {"w0", "w1", "w2", "w3"}, kNow);
  EXPECT_TRUE(AssignmentFor(state, workers, 0xab, 0).spec().checkpoint().resume());
  // One replica: no group to meet in.
  JobState single;
  single.job = Job(2, 1);
  StartAttempt(single, workers, {"w0", "w1"}, kNow);
  const v1::StageAssignment alone = AssignmentFor(single, workers, 0xab, 0);
  EXPECT_TRUE(alone.replica_group().empty());
  EXPECT_THAT(alone.replica_addresses(), IsEmpty());
}

// After a restart of the coordinator: a running job waits for its workers
// (those of finished stages are not waited for); its checkpoint counts on
// every stage.
TEST(JobPlacementTest, ARecoveredRunningJobAwaitsItsWorkersAndKeepsItsCheckpoint) {
  v1::Job job = Job(2, 1);
  job.mutable_status()->set_phase(v1::RUNNING);
  job.mutable_status()->set_checkpoint_step(40);
  job.mutable_status()->add_stages()->set_finished(true);
  job.mutable_status()->add_stages()->set_worker_id("w1");
  const JobState state = RecoveredJob(job, kNow);
  EXPECT_TRUE(state.awaiting_reconnect);
  ASSERT_EQ(state.stages.size(), 2u);
  EXPECT_TRUE(state.stages[0].reconnected);
  EXPECT_FALSE(state.stages[1].reconnected);
  EXPECT_THAT(state.shards.at(40), UnorderedElementsAre(0, 1));
  job.mutable_status()->set_phase(v1::QUEUED);
  EXPECT_FALSE(RecoveredJob(job, kNow).awaiting_reconnect);
}

TEST(JobPlacementTest, AStageWithoutProgressPastTheTimeoutIsStalledUnlessFinished) {
  WorkerRegistry workers = Workers(2);
  JobState state;
  state.job = Job(2, 1);
  StartAttempt(state, workers, {"w0", "w1"}, kNow);
  state.stages[1].last_progress = kNow + absl::Seconds(100);
  EXPECT_THAT(StalledStages(state, kNow + absl::Seconds(121), absl::Seconds(120)),
              ElementsAre("stage 0 on worker w0"));
  state.status().mutable_stages(0)->set_finished(true);
  EXPECT_THAT(StalledStages(state, kNow + absl::Seconds(121), absl::Seconds(120)), IsEmpty());
}

}  // namespace
}  // namespace paci
