#include "operator/reconcile/training_job_reconciler.h"

#include <cmath>
#include <limits>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "common/job_token.h"
#include "common/operator_job_name.h"
#include "operator/reconcile/job_objects.h"
#include "operator/reconcile/reconcile_test_util.h"

namespace paci::op {
namespace {

using nlohmann::json;
using test::Job;
using test::Names;
using test::kNow;
using test::Pod;
using test::Reasons;
using test::World;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::Pair;

json Submitted(json job, const std::string& phase = "Pending") {
  job["status"] = {{"phase", phase}, {"coordinatorJob", "kjv-01234567-g1"}};
  return job;
}

// The coordinator's job, with the spec the operator submitted for Job().
v1::Job CoordinatorJob(v1::JobPhase phase) {
  v1::Job job;
  job.set_name("kjv-01234567-g1");
  *job.mutable_spec() = *JobSpecFromTrainingJob(ParseTrainingJob(Job()), job.name());
  job.mutable_status()->set_phase(phase);
  job.mutable_status()->set_step(60);
  job.mutable_status()->set_total_steps(60);
  job.mutable_status()->set_train_loss(2.5);
  job.mutable_status()->set_validation_loss(2.6);
  job.mutable_status()->set_tokens_per_second(1234);
  job.mutable_status()->set_attempt(1);
  for (int s = 0; s < 2; ++s) {
    v1::StageStatus* stage = job.mutable_status()->add_stages();
    stage->set_stage(s);
    stage->set_worker_id("team-a.kjv-worker-" + std::to_string(1 - s));
    stage->set_drift_max(1 - s);
    stage->set_drift_bound(1 - s);
    stage->set_busy_seconds(9);
    stage->set_idle_seconds(1);
  }
  return job;
}

// A submitted job, both its pods running, and the coordinator's view of it.
ObservedWorld Observed(const std::string& phase, v1::JobPhase coordinator_phase) {
  ObservedWorld world = World(Submitted(Job(), phase));
  world.pods = {Pod(0, "Running"), Pod(1, "Running")};
  world.service_exists = true;
  world.network_policy_exists = true;
  world.coordinator_job = CoordinatorJob(coordinator_phase);
  return world;
}

// The pure function as a table: each case is (object, observed world) -> actions.
TEST(TrainingJobReconcilerTest, NewJobGetsFinalizerPodsServiceAndIsSubmitted) {
  json job = Job();
  job["metadata"].erase("finalizers");
  ReconcileActions actions = ReconcileTrainingJob(World(job), ReconcilerOptions{});

  EXPECT_TRUE(actions.add_finalizer);
  ASSERT_TRUE(actions.create_service.has_value());
  EXPECT_EQ((*actions.create_service)["spec"]["clusterIP"], "None");
  ASSERT_TRUE(actions.create_network_policy.has_value());
  EXPECT_EQ((*actions.create_network_policy)["kind"], "NetworkPolicy");
  EXPECT_THAT(Names(actions.create_pods), ElementsAre("kjv-worker-0", "kjv-worker-1"));
  // Without network policies (--network_policies=false) none is made.
  ReconcilerOptions without;
  without.network_policies = false;
  EXPECT_FALSE(ReconcileTrainingJob(World(job), without).create_network_policy.has_value());
  ASSERT_TRUE(actions.submit.has_value());
  EXPECT_EQ(actions.submit->name(), "kjv-01234567-g1");
  EXPECT_EQ(actions.submit->pipeline().num_stages(), 2);
  EXPECT_EQ(actions.submit->run_policy().backoff_limit(), 2);
  EXPECT_EQ(actions.submit->run_policy().worker_selector().at(kWorkerJobLabel), "team-a.kjv");
  EXPECT_THAT(actions.submit_labels, ElementsAre(Pair("paci.dev/namespace", "team-a")));
  // Each worker pod serves this job only: its links take no message larger than its frames.
  const v1::PipelineSpec& p = actions.submit->pipeline();
  const v1::ModelSpec& m = actions.submit->model();
  const int64_t frame = int64_t{p.micro_batch_size()} * m.seq_len() * m.d_model() * 4 + 65536;
  EXPECT_GT(frame, 65536);
  for (const json& pod : actions.create_pods) {
    EXPECT_THAT(pod["spec"]["containers"][0]["args"].dump(),
                HasSubstr(absl::StrCat("--max_link_message_bytes=", frame)));
  }
  ASSERT_TRUE(actions.status.has_value());
  EXPECT_EQ((*actions.status)["phase"], "Pending");
  EXPECT_EQ((*actions.status)["coordinatorJob"], "kjv-01234567-g1");
  EXPECT_EQ((*actions.status)["observedGeneration"], 1);
  ASSERT_EQ(actions.events.size(), 1u);
  EXPECT_EQ(actions.events[0].reason, "Submitted");
  EXPECT_TRUE(actions.requeue_after.has_value());
}

TEST(TrainingJobReconcilerTest, ReplicasMakeOnePodPerStageOfEachReplica) {
  json job = Job();
  job["spec"]["pipeline"]["dataParallel"] = 3;
  ReconcileActions actions = ReconcileTrainingJob(World(job), ReconcilerOptions{});
  EXPECT_THAT(Names(actions.create_pods),
              ElementsAre("kjv-worker-0", "kjv-worker-1", "kjv-worker-2", "kjv-worker-3",
                          "kjv-worker-4", "kjv-worker-5"));
  ASSERT_TRUE(actions.submit.has_value());
  EXPECT_EQ(actions.submit->pipeline().data_parallel(), 3);
  ASSERT_EQ(actions.events.size(), 1u);
  EXPECT_EQ(actions.events[0].message, "submitted as kjv-01234567-g1 for 6 worker pods");
  job["spec"]["pipeline"]["dataParallel"] = 0;
  ReconcileActions refused = ReconcileTrainingJob(World(job), ReconcilerOptions{});
  EXPECT_TRUE(refused.create_pods.empty());
  ASSERT_TRUE(refused.status.has_value());
  EXPECT_EQ((*refused.status)["phase"], "Failed");
  EXPECT_NE((*refused.status).dump().find("pipeline.data_parallel"), std::string::npos)
      << (*refused.status).dump();
}

// spec.pipeline.globalBatch with a drift limit: the submitted spec carries the accumulation
// derived from the global batch; the status shows the limit, that accumulation and the global
// batch. A global batch too small for the limit fails the job naming max_drift.
TEST(TrainingJobReconcilerTest, AGlobalBatchDerivesTheAccumulationAndIsShownInTheStatus) {
  json job = Job(4);
  job["spec"]["pipeline"].erase("accumulation");
  job["spec"]["pipeline"]["globalBatch"] = 3 * job["spec"]["pipeline"]["microBatchSize"].get<int>();
  job["spec"]["pipeline"]["maxDrift"] = 1;
  ReconcileActions actions = ReconcileTrainingJob(World(job), ReconcilerOptions{});
  ASSERT_TRUE(actions.submit.has_value());
  EXPECT_EQ(actions.submit->pipeline().accumulation(), 3);
  EXPECT_EQ(actions.submit->pipeline().max_drift(), 1);

  ObservedWorld world = Observed("Running", v1::RUNNING);
  *world.coordinator_job->mutable_spec() = *actions.submit;
  ReconcileActions running = ReconcileTrainingJob(world, ReconcilerOptions{});
  ASSERT_TRUE(running.status.has_value());
  EXPECT_EQ((*running.status)["driftLimit"], 1);
  EXPECT_EQ((*running.status)["accumulation"], 3);
  EXPECT_EQ((*running.status)["globalBatch"], job["spec"]["pipeline"]["globalBatch"]);
  // The automatic default, said in the status: prediction after the first four tenths of the
  // run drained (P = 4, a = 3: half the forwards cross a step, common/schedule_kind.cc).
  EXPECT_EQ((*running.status)["driftCorrection"], "predict");
  EXPECT_EQ((*running.status)["warmupSteps"],
            (2 * actions.submit->training().steps() + 4) / 5);

  job["spec"]["pipeline"]["globalBatch"] = job["spec"]["pipeline"]["microBatchSize"];
  ReconcileActions refused = ReconcileTrainingJob(World(job), ReconcilerOptions{});
  EXPECT_FALSE(refused.submit.has_value());
  ASSERT_TRUE(refused.status.has_value());
  EXPECT_EQ((*refused.status)["phase"], "Failed");
  EXPECT_THAT((*refused.status)["message"].get<std::string>(),
              HasSubstr("pipeline.max_drift: accumulation 1 lets a micro-batch cross ceil(3/1) = 3"));
}

TEST(TrainingJobReconcilerTest, WorkerPodsCarryOwnerSelectorAndDownwardApi) {
  ReconcilerOptions options;
  options.worker_coordinator_address = "coord:7070";
  options.extra_worker_args = {"--coordinator_auth_token_file=/etc/paci/token"};
  ReconcileActions actions = ReconcileTrainingJob(World(Job()), options);
  ASSERT_EQ(actions.create_pods.size(), 2u);
  const json& pod = actions.create_pods[1];
  EXPECT_EQ(pod["metadata"]["namespace"], "team-a");
  EXPECT_EQ(pod["metadata"]["labels"][kWorkerIndexLabel], "1");
  EXPECT_EQ(pod["metadata"]["ownerReferences"][0]["uid"], "0123456789abcdef");
  EXPECT_EQ(pod["metadata"]["ownerReferences"][0]["controller"], true);
  EXPECT_EQ(pod["spec"]["restartPolicy"], "Never");
  EXPECT_EQ(pod["spec"]["nodeSelector"]["pool"], "cpu");
  const json& container = pod["spec"]["containers"][0];
  EXPECT_EQ(container["image"], "example/worker:1");
  const std::string args = container["args"].dump();
  EXPECT_THAT(args, HasSubstr("--coordinator=coord:7070"));
  EXPECT_THAT(args, HasSubstr("--labels=paci.dev/job=team-a.kjv"));
  EXPECT_THAT(args, HasSubstr("--listen=$(POD_IP):7000"));
  EXPECT_THAT(args, HasSubstr("--coordinator_auth_token_file=/etc/paci/token"));
  EXPECT_THAT(container["env"].dump(), HasSubstr("status.podIP"));
}

TEST(TrainingJobReconcilerTest, WithATokenKeyOnlyTheJobsOwnPodsHoldTheTokenItsWorkersMustShow) {
  ReconcilerOptions options;
  options.worker_token_key = "k3y-of-at-least-thirty-two-characters!";
  ReconcileActions actions = ReconcileTrainingJob(World(Job()), options);
  // The token: the key's HMAC of the job's uid, in a Secret of the job's own.
  const std::string token = JobToken(options.worker_token_key, "0123456789abcdef");
  ASSERT_TRUE(actions.create_token_secret.has_value());
  const json& secret = *actions.create_token_secret;
  EXPECT_EQ(secret["metadata"]["name"], "kjv-worker-token");
  EXPECT_EQ(secret["metadata"]["ownerReferences"][0]["uid"], "0123456789abcdef");
  EXPECT_EQ(secret["stringData"]["token"], token);
  // The coordinator places on the job only workers that present it.
  ASSERT_TRUE(actions.submit.has_value());
  EXPECT_EQ(actions.submit->run_policy().worker_selector().at(kWorkerTokenLabel),
            TokenDigest(token));
  // Every worker pod mounts it and passes it to the worker.
  ASSERT_EQ(actions.create_pods.size(), 2u);
  for (const json& pod : actions.create_pods) {
    EXPECT_THAT(pod["spec"]["volumes"].dump(), HasSubstr(R"("secretName":"kjv-worker-token")"));
    const json& container = pod["spec"]["containers"][0];
    EXPECT_THAT(container["volumeMounts"].dump(), HasSubstr(R"("mountPath":"/etc/paci/job-token")"));
    EXPECT_THAT(container["args"].dump(), HasSubstr("--job_token_file=/etc/paci/job-token/token"));
  }
  // Another job (another uid) has another token; no key, no token.
  json other = Job();
  other["metadata"]["uid"] = "fedcba9876543210";
  EXPECT_NE((*ReconcileTrainingJob(World(other), options).create_token_secret)["stringData"]["token"],
            token);
  const ReconcileActions without = ReconcileTrainingJob(World(Job()), ReconcilerOptions{});
  EXPECT_FALSE(without.create_token_secret.has_value());
  EXPECT_EQ(without.submit->run_policy().worker_selector().count(kWorkerTokenLabel), 0u);
  EXPECT_THAT(without.create_pods[0].dump(), Not(HasSubstr("job-token")));
  // A running job whose pods all exist makes no Secret, and its selector is not a policy change.
  ObservedWorld running = Observed("Running", v1::RUNNING);
  *running.coordinator_job->mutable_spec() = *actions.submit;
  running.coordinator_job->set_name("kjv-01234567-g1");
  const ReconcileActions steady = ReconcileTrainingJob(running, options);
  EXPECT_FALSE(steady.create_token_secret.has_value());
  EXPECT_FALSE(steady.update_run_policy.has_value());
}

TEST(TrainingJobReconcilerTest, LinkTlsGivesTheWorkersTheSecretsCertificateForTheirStageLinks) {
  ReconcilerOptions options;
  options.worker_secret = "paci-worker-tls";
  options.worker_secret_flags = {{"ca.crt", "coordinator_tls_ca"}};
  options.worker_link_tls = true;
  const json args = ReconcileTrainingJob(World(Job()), options).create_pods[0]["spec"]["containers"][0]["args"];
  for (const char* flag :
       {"--tls_ca=/etc/paci/coordinator/ca.crt", "--tls_cert=/etc/paci/coordinator/tls.crt",
        "--tls_key=/etc/paci/coordinator/tls.key", "--link_tls_server_name=paci-worker.team-a"}) {
    EXPECT_THAT(args.dump(), HasSubstr(flag));
  }
  options.worker_link_tls = false;
  EXPECT_THAT(ReconcileTrainingJob(World(Job()), options).create_pods[0].dump(),
              Not(HasSubstr("--tls_cert=")));
}

TEST(TrainingJobReconcilerTest, MissingPodIsCreatedAndNothingElse) {
  ObservedWorld world = Observed("Running", v1::RUNNING);
  world.pods.pop_back();
  world.coordinator_job->mutable_status()->set_step(30);
  ReconcileActions actions = ReconcileTrainingJob(world, ReconcilerOptions{});
  EXPECT_FALSE(actions.add_finalizer);
  EXPECT_FALSE(actions.create_service.has_value());
  EXPECT_FALSE(actions.create_network_policy.has_value());
  EXPECT_THAT(Names(actions.create_pods), ElementsAre("kjv-worker-1"));
  EXPECT_THAT(actions.delete_pods, IsEmpty());
  EXPECT_FALSE(actions.submit.has_value());
  ASSERT_TRUE(actions.status.has_value());
  EXPECT_EQ((*actions.status)["step"], 30);
  EXPECT_EQ((*actions.status)["maxDrift"], 1);
  EXPECT_DOUBLE_EQ((*actions.status)["stages"][0]["idleFraction"].get<double>(), 0.1);
  // Which pod runs each stage (the coordinator places stages on any of the job's pods).
  EXPECT_EQ((*actions.status)["stages"][0]["pod"], "kjv-worker-1");
  EXPECT_EQ((*actions.status)["stages"][1]["pod"], "kjv-worker-0");
}

TEST(TrainingJobReconcilerTest, StatusFiguresAreRoundedForKubectlsColumns) {
  ObservedWorld world = Observed("Running", v1::RUNNING);
  v1::JobStatus& s = *world.coordinator_job->mutable_status();
  s.set_train_loss(2.825814366340637);
  s.set_validation_loss(2.91237);
  s.set_tokens_per_second(71891.53909675782);
  s.mutable_stages(0)->set_idle_seconds(2);  // 2 of 11 seconds
  ReconcileActions actions = ReconcileTrainingJob(world, ReconcilerOptions{});
  ASSERT_TRUE(actions.status.has_value());
  const json& status = *actions.status;
  EXPECT_EQ(status["trainLoss"].dump(), "2.8258");
  EXPECT_EQ(status["validationLoss"].dump(), "2.9124");
  EXPECT_TRUE(status["tokensPerSecond"].is_number_integer());
  EXPECT_EQ(status["tokensPerSecond"].dump(), "71892");
  EXPECT_EQ(status["stages"][0]["idleFraction"].dump(), "0.1818");

  // A diverged loss is no number JSON can hold: left out, not null.
  s.set_train_loss(std::nan(""));
  s.set_tokens_per_second(std::numeric_limits<double>::infinity());
  world.job["status"] = status;
  actions = ReconcileTrainingJob(world, ReconcilerOptions{});
  ASSERT_TRUE(actions.status.has_value());
  EXPECT_FALSE(actions.status->contains("trainLoss"));
  EXPECT_FALSE(actions.status->contains("tokensPerSecond"));
  EXPECT_EQ((*actions.status)["validationLoss"].dump(), "2.9124");
}

TEST(TrainingJobReconcilerTest, FailedPodIsDeletedWithAWarning) {
  ObservedWorld world = Observed("Running", v1::RESTARTING);
  world.pods[1]["status"]["phase"] = "Failed";
  ReconcileActions actions = ReconcileTrainingJob(world, ReconcilerOptions{});
  EXPECT_THAT(actions.delete_pods, ElementsAre("kjv-worker-1"));
  EXPECT_THAT(actions.create_pods, IsEmpty());  // recreated once it is gone
  ASSERT_TRUE(actions.status.has_value());
  EXPECT_EQ((*actions.status)["phase"], "Restarting");
  EXPECT_THAT(Reasons(actions), ElementsAre("WorkerExited", "Restarting"));
}

TEST(TrainingJobReconcilerTest, AWorkerKilledForMemorySaysSo) {
  ObservedWorld world = Observed("Running", v1::RESTARTING);
  world.pods[1]["status"] = json::parse(R"({"phase": "Failed", "containerStatuses": [
      {"name": "worker", "state": {"terminated": {"reason": "OOMKilled", "exitCode": 137}}}]})");
  ReconcileActions actions = ReconcileTrainingJob(world, ReconcilerOptions{});
  ASSERT_THAT(Reasons(actions), ElementsAre("WorkerExited", "Restarting"));
  EXPECT_EQ(actions.events[0].message,
            "worker pod kjv-worker-1 ended (Failed, OOMKilled, exit code 137); replacing it");
}

TEST(TrainingJobReconcilerTest, AnImageNotOnTheNodeUnderPullPolicyNeverBlocksTheWorkers) {
  ObservedWorld world = Observed("Running", v1::RUNNING);
  world.pods[1]["status"] = json::parse(R"({"phase": "Pending", "containerStatuses": [
      {"name": "worker", "state": {"waiting": {"reason": "ErrImageNeverPull", "message":
       "Container image \"example/worker:2\" is not present with pull policy of Never"}}}]})");
  ReconcileActions actions = ReconcileTrainingJob(world, ReconcilerOptions{});
  ASSERT_TRUE(actions.status.has_value());
  const json* blocked = nullptr;
  for (const json& c : (*actions.status)["conditions"]) {
    if (c["type"] == "WorkersBlocked") blocked = &c;
  }
  ASSERT_NE(blocked, nullptr);
  EXPECT_EQ((*blocked)["reason"], "ErrImageNeverPull");
  EXPECT_EQ((*blocked)["message"],
            "pod kjv-worker-1: ErrImageNeverPull: Container image \"example/worker:2\" is not "
            "present with pull policy of Never");
  EXPECT_THAT(Reasons(actions), ElementsAre("ErrImageNeverPull"));
}

TEST(TrainingJobReconcilerTest, APodThatCannotStartIsAConditionAndOneWarning) {
  ObservedWorld world = Observed("Running", v1::RUNNING);
  world.pods[1]["status"] = json::parse(R"({"phase": "Pending", "containerStatuses": [
      {"name": "worker", "state": {"waiting": {"reason": "ImagePullBackOff",
                                              "message": "Back-off pulling image \"example/worker:2\""}}}]})");
  world.pods[0]["status"] = json::parse(R"({"phase": "Pending", "conditions": [
      {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
       "message": "0/3 nodes are available: 3 Insufficient cpu."}]})");
  ReconcileActions actions = ReconcileTrainingJob(world, ReconcilerOptions{});
  ASSERT_TRUE(actions.status.has_value());
  json blocked;
  for (const json& c : (*actions.status)["conditions"]) {
    if (c["type"] == "WorkersBlocked") blocked = c;
  }
  EXPECT_EQ(blocked["status"], "True");
  EXPECT_EQ(blocked["reason"], "Unschedulable");  // the first pod's
  EXPECT_EQ(blocked["message"],
            "pod kjv-worker-0: Unschedulable: 0/3 nodes are available: 3 Insufficient cpu. (and 1 more)");
  EXPECT_THAT(Reasons(actions), ElementsAre("Unschedulable"));
  EXPECT_EQ(actions.events[0].type, "Warning");
  // Seen again: the condition stays, no second Event.
  world.job["status"] = *actions.status;
  actions = ReconcileTrainingJob(world, ReconcilerOptions{});
  EXPECT_THAT(Reasons(actions), IsEmpty());
  // The pods start: the condition turns False.
  world.pods = {Pod(0, "Running"), Pod(1, "Running")};
  actions = ReconcileTrainingJob(world, ReconcilerOptions{});
  ASSERT_TRUE(actions.status.has_value());
  for (const json& c : (*actions.status)["conditions"]) {
    if (c["type"] == "WorkersBlocked") {
      EXPECT_EQ(c["status"], "False");
    }
  }
}

TEST(TrainingJobReconcilerTest, TheCoordinatorsStalledConditionAndCheckpointStepAreMirrored) {
  ObservedWorld world = Observed("Running", v1::RUNNING);
  v1::JobCondition* stalled = world.coordinator_job->mutable_status()->add_conditions();
  stalled->set_type("Stalled");
  stalled->set_status(true);
  stalled->set_reason("NoProgress");
  stalled->set_message("stage 1 made no progress for 120s");
  world.coordinator_job->mutable_status()->set_checkpoint_step(45);
  ReconcileActions actions = ReconcileTrainingJob(world, ReconcilerOptions{});
  ASSERT_TRUE(actions.status.has_value());
  EXPECT_EQ((*actions.status)["checkpointStep"], 45);
  json mirrored;
  for (const json& c : (*actions.status)["conditions"]) {
    if (c["type"] == "Stalled") mirrored = c;
  }
  EXPECT_EQ(mirrored["status"], "True");
  EXPECT_EQ(mirrored["reason"], "NoProgress");
  EXPECT_EQ(mirrored["message"], "stage 1 made no progress for 120s");
}

// The condition `type` of a status, or null.
json ConditionOf(const json& status, const std::string& type) {
  for (const json& c : status["conditions"]) {
    if (c["type"] == type) return c;
  }
  return nullptr;
}

// pipeline.elastic: pods for the largest shape of the range, none behind the
// gang gate (the coordinator runs the shape those that start allow).
TEST(TrainingJobReconcilerTest, AnElasticJobGetsPodsForItsLargestShapeOutsideTheGang) {
  json job = Job();
  job["spec"]["pipeline"]["elastic"] = {{"minStages", 1}, {"maxStages", 3}};
  job["spec"]["model"]["numLayers"] = 4;
  job["spec"]["checkpoint"] = {{"directory", "/ckpt"}, {"interval", 5}};
  ReconcileActions actions = ReconcileTrainingJob(World(job), ReconcilerOptions{});
  ASSERT_TRUE(actions.status.has_value()) << actions.events.size();
  EXPECT_NE((*actions.status)["phase"], "Failed") << (*actions.status)["message"];
  EXPECT_THAT(Names(actions.create_pods),
              ElementsAre("kjv-worker-0", "kjv-worker-1", "kjv-worker-2"));
  for (const json& pod : actions.create_pods) {
    EXPECT_FALSE(pod["spec"].contains("schedulingGates")) << pod["metadata"]["name"];
  }
  // Without the range: behind the gate, the spec's own P x R.
  actions = ReconcileTrainingJob(World(Job()), ReconcilerOptions{});
  ASSERT_EQ(actions.create_pods.size(), 2u);
  EXPECT_TRUE(actions.create_pods[0]["spec"].contains("schedulingGates"));
}

// pipeline.elastic: the coordinator's Resizing condition, its shape and
// resizes in .status, with an Event when a resize starts and when it is done.
TEST(TrainingJobReconcilerTest, AnElasticJobsResizesAreMirroredWithEvents) {
  ObservedWorld world = Observed("Running", v1::RUNNING);
  v1::Job& coordinator = *world.coordinator_job;
  v1::ElasticSpec* elastic = coordinator.mutable_spec()->mutable_pipeline()->mutable_elastic();
  elastic->set_min_stages(1);
  elastic->set_max_stages(2);
  coordinator.mutable_spec()->mutable_pipeline()->set_num_stages(1);  // shrunk
  coordinator.mutable_status()->set_resizes(1);
  v1::JobCondition* resizing = coordinator.mutable_status()->add_conditions();
  resizing->set_type("Resizing");
  resizing->set_status(true);
  resizing->set_reason("WorkersLost");
  resizing->set_message("from 2 stages x 1 replica to 1 stage x 1 replica at step 40: ...");
  ReconcileActions actions = ReconcileTrainingJob(world, ReconcilerOptions{});
  ASSERT_TRUE(actions.status.has_value());
  EXPECT_EQ((*actions.status)["shape"], "1 stage x 1 replica");
  EXPECT_EQ((*actions.status)["resizes"], 1);
  EXPECT_EQ(ConditionOf(*actions.status, "Resizing")["status"], "True");
  EXPECT_EQ(ConditionOf(*actions.status, "Resizing")["reason"], "WorkersLost");
  ASSERT_EQ(actions.events.size(), 1u);
  EXPECT_EQ(actions.events[0].reason, "Resizing");
  EXPECT_EQ(actions.events[0].message, resizing->message());
  // Seen once: no Event again, when it is placed neither (the same resize).
  world.job["status"] = *actions.status;
  EXPECT_TRUE(ReconcileTrainingJob(world, ReconcilerOptions{}).events.empty());
  resizing->set_status(false);
  resizing->set_reason("Resized");
  resizing->set_message(resizing->message() + "; running at 1 stage x 1 replica, 2.1 s after");
  actions = ReconcileTrainingJob(world, ReconcilerOptions{});
  ASSERT_TRUE(actions.status.has_value());
  EXPECT_EQ(ConditionOf(*actions.status, "Resizing")["status"], "False");
  EXPECT_TRUE(actions.events.empty());
  // The next resize, decided and placed between two polls: one Event, Resized.
  world.job["status"] = *actions.status;
  coordinator.mutable_status()->set_resizes(2);
  resizing->set_message("from 1 stage x 1 replica to 2 stages x 1 replica at step 60: ...");
  actions = ReconcileTrainingJob(world, ReconcilerOptions{});
  ASSERT_EQ(actions.events.size(), 1u);
  EXPECT_EQ(actions.events[0].reason, "Resized");
  EXPECT_EQ(actions.events[0].message, resizing->message());
}

TEST(TrainingJobReconcilerTest, ARunPolicyChangedWhileRunningIsSentToTheCoordinator) {
  ObservedWorld world = Observed("Running", v1::RUNNING);
  ReconcileActions actions = ReconcileTrainingJob(world, ReconcilerOptions{});
  EXPECT_FALSE(actions.update_run_policy.has_value());  // as submitted: nothing to do
  world.job["spec"]["runPolicy"] = {{"backoffLimit", 5}, {"activeDeadlineSeconds", 7200}};
  world.job["metadata"]["generation"] = 2;
  actions = ReconcileTrainingJob(world, ReconcilerOptions{});
  ASSERT_TRUE(actions.update_run_policy.has_value());
  EXPECT_EQ(actions.update_run_policy->coordinator_job, "kjv-01234567-g1");
  EXPECT_EQ(actions.update_run_policy->policy.backoff_limit(), 5);
  EXPECT_EQ(actions.update_run_policy->policy.active_deadline_seconds(), 7200);
  // The worker selector stays the job's.
  EXPECT_EQ(actions.update_run_policy->policy.worker_selector().at("paci.dev/job"),
            world.coordinator_job->spec().run_policy().worker_selector().at("paci.dev/job"));
  ASSERT_THAT(Reasons(actions), ElementsAre("RunPolicyUpdated"));
  EXPECT_THAT(actions.events[0].message, HasSubstr("backoffLimit 5, activeDeadlineSeconds 7200"));
  EXPECT_EQ((*actions.status)["observedGeneration"], 2);
  // A finished job's policy is not sent.
  world.coordinator_job->mutable_status()->set_phase(v1::SUCCEEDED);
  EXPECT_FALSE(ReconcileTrainingJob(world, ReconcilerOptions{}).update_run_policy.has_value());
}

TEST(TrainingJobReconcilerTest, WorkerPodsAreCreatedAtTheGangGate) {
  ReconcileActions actions = ReconcileTrainingJob(World(Job()), ReconcilerOptions{});
  ASSERT_EQ(actions.create_pods.size(), 2u);
  for (const json& pod : actions.create_pods) {
    EXPECT_EQ(pod["spec"]["schedulingGates"], json::parse(R"([{"name": "paci.dev/gang"}])"));
  }
}

// A submitted job whose two pods wait at the gang gate, beside one node.
ObservedWorld AtTheGate() {
  ObservedWorld world = Observed("Pending", v1::QUEUED);
  for (json& pod : world.pods) {
    pod["metadata"]["namespace"] = "team-a";
    pod["spec"]["schedulingGates"] = json::parse(R"([{"name": "paci.dev/gang"}])");
    pod["status"]["phase"] = "Pending";
  }
  world.nodes = {json::parse(R"({"metadata": {"name": "n1", "labels": {"pool": "cpu"}},
      "status": {"allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110"},
                 "conditions": [{"type": "Ready", "status": "True"}]}})")};
  world.cluster_pods = world.pods;
  return world;
}

TEST(TrainingJobReconcilerTest, GatedWorkersAreReleasedTogetherWhenAllOfThemFit) {
  ObservedWorld world = AtTheGate();
  // One pod is missing: nothing is released before it exists.
  ObservedWorld one = world;
  one.pods.pop_back();
  ReconcileActions actions = ReconcileTrainingJob(one, ReconcilerOptions{});
  EXPECT_THAT(Names(actions.create_pods), ElementsAre("kjv-worker-1"));
  EXPECT_THAT(actions.release_pods, IsEmpty());
  // One is on its way out (a replacement comes): nothing is released yet.
  ObservedWorld leaving = world;
  leaving.pods[1]["metadata"]["deletionTimestamp"] = "2027-01-15T08:00:00Z";
  EXPECT_THAT(ReconcileTrainingJob(leaving, ReconcilerOptions{}).release_pods, IsEmpty());
  // Both there and room for both: both released at once.
  actions = ReconcileTrainingJob(world, ReconcilerOptions{});
  ASSERT_EQ(actions.release_pods.size(), 2u);
  EXPECT_EQ(actions.release_pods[0].first, "kjv-worker-0");
  EXPECT_EQ(actions.release_pods[1].first, "kjv-worker-1");
  EXPECT_EQ(actions.release_pods[0].second, json::array());
  ASSERT_TRUE(actions.status.has_value());
  const json admitted = ConditionOf(*actions.status, "WorkersAdmitted");
  EXPECT_EQ(admitted["status"], "True");
  EXPECT_EQ(admitted["reason"], "Released");
  EXPECT_EQ(admitted["message"], "all 2 worker pods fit on the nodes: released together");
  EXPECT_THAT(Reasons(actions), ElementsAre("Released"));
}

TEST(TrainingJobReconcilerTest, GatedWorkersWithoutRoomWaitWithAConditionSayingWhy) {
  ObservedWorld world = AtTheGate();
  for (json& pod : world.pods) {
    pod["spec"]["containers"] = json::parse(R"([{"resources": {"requests": {"cpu": "6"}}}])");
  }
  world.cluster_pods = world.pods;
  // Another job's pod holds 8 of the 16 cores: 2 x 6 does not fit now.
  world.cluster_pods.push_back(json::parse(R"({"metadata": {"name": "other", "namespace": "team-b"},
      "spec": {"nodeName": "n1", "containers": [{"resources": {"requests": {"cpu": "8"}}}]},
      "status": {"phase": "Running"}})"));
  ReconcileActions actions = ReconcileTrainingJob(world, ReconcilerOptions{});
  EXPECT_THAT(actions.release_pods, IsEmpty());
  ASSERT_TRUE(actions.status.has_value());
  json admitted = ConditionOf(*actions.status, "WorkersAdmitted");
  EXPECT_EQ(admitted["status"], "False");
  EXPECT_EQ(admitted["reason"], "WaitingForCapacity");
  EXPECT_THAT(admitted["message"].get<std::string>(),
              HasSubstr("2 worker pods at the gate ask for cpu 12 together; free now on the 1 "
                        "nodes they may use: cpu 8"));
  EXPECT_THAT(Reasons(actions), ElementsAre("WaitingForCapacity"));
  EXPECT_EQ(actions.requeue_after, ReconcilerOptions{}.poll_interval);  // looks again
  // Seen again: no second Event. The other pod ends: released.
  world.job["status"] = *actions.status;
  EXPECT_THAT(Reasons(ReconcileTrainingJob(world, ReconcilerOptions{})), IsEmpty());
  world.cluster_pods.pop_back();
  actions = ReconcileTrainingJob(world, ReconcilerOptions{});
  EXPECT_EQ(actions.release_pods.size(), 2u);
  EXPECT_EQ(ConditionOf(*actions.status, "WorkersAdmitted")["status"], "True");
  // More than the node could ever hold: Unschedulable, a Warning.
  for (json& pod : world.pods) pod["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "9";
  world.cluster_pods = world.pods;
  actions = ReconcileTrainingJob(world, ReconcilerOptions{});
  EXPECT_THAT(actions.release_pods, IsEmpty());
  EXPECT_EQ(ConditionOf(*actions.status, "WorkersAdmitted")["reason"], "Unschedulable");
  ASSERT_THAT(Reasons(actions), ElementsAre("Unschedulable"));
  EXPECT_EQ(actions.events[0].type, "Warning");
}

// A Failed job at generation 1 (its Failed condition says so), observed at `generation`.
ObservedWorld FailedAt1(int64_t generation) {
  ObservedWorld world = World(Submitted(Job(), "Failed"));
  world.job["metadata"]["generation"] = generation;
  world.job["status"]["conditions"] = json::parse(R"([{"type": "Failed", "status": "True",
      "reason": "StageFailed", "message": "stage 1: out of memory", "observedGeneration": 1,
      "lastTransitionTime": "2027-01-15T08:00:00Z"}])");
  world.job["status"]["completionTime"] = "2027-01-15T08:00:00Z";
  world.coordinator_job = CoordinatorJob(v1::FAILED);
  world.service_exists = true;
  world.network_policy_exists = true;
  return world;
}

TEST(TrainingJobReconcilerTest, AFailedJobWhoseSpecIsFixedRunsAgainAsANewCoordinatorJob) {
  // Unchanged: it stays Failed; nothing runs.
  ReconcileActions actions = ReconcileTrainingJob(FailedAt1(1), ReconcilerOptions{});
  EXPECT_FALSE(actions.submit.has_value());
  EXPECT_THAT(actions.create_pods, IsEmpty());
  // Re-applied with a fix (generation 2): submitted again under generation 2's name.
  ObservedWorld fixed = FailedAt1(2);
  actions = ReconcileTrainingJob(fixed, ReconcilerOptions{});
  ASSERT_TRUE(actions.submit.has_value());
  EXPECT_EQ(actions.submit->name(), "kjv-01234567-g2");
  EXPECT_THAT(Names(actions.create_pods), ElementsAre("kjv-worker-0", "kjv-worker-1"));
  ASSERT_TRUE(actions.status.has_value());
  EXPECT_EQ((*actions.status)["phase"], "Pending");
  EXPECT_EQ((*actions.status)["coordinatorJob"], "kjv-01234567-g2");
  EXPECT_FALSE(actions.status->contains("completionTime"));
  json failed;
  for (const json& c : (*actions.status)["conditions"]) {
    if (c["type"] == "Failed") failed = c;
  }
  EXPECT_EQ(failed["status"], "False");
  EXPECT_EQ(failed["reason"], "SpecChanged");
  EXPECT_THAT(Reasons(actions), ElementsAre("Rerunning", "Submitted"));
  EXPECT_EQ(actions.events[0].message,
            "generation 2 changed the spec after the job failed at generation 1; running it again");
  // The coordinator's answer to that submit (the executor's second call) is reported once.
  fixed.submit_result = absl::OkStatus();
  actions = ReconcileTrainingJob(fixed, ReconcilerOptions{});
  EXPECT_FALSE(actions.submit.has_value());
  EXPECT_THAT(Reasons(actions), ElementsAre("Rerunning", "Submitted"));
  EXPECT_EQ((*actions.status)["coordinatorJob"], "kjv-01234567-g2");
}

TEST(TrainingJobReconcilerTest, CoordinatorSucceededFinishesTheJobAndStopsWorkers) {
  ObservedWorld world = Observed("Running", v1::SUCCEEDED);
  ReconcileActions actions = ReconcileTrainingJob(world, ReconcilerOptions{});
  ASSERT_TRUE(actions.status.has_value());
  const json& status = *actions.status;
  EXPECT_EQ(status["phase"], "Succeeded");
  EXPECT_EQ(status["step"], 60);
  EXPECT_DOUBLE_EQ(status["trainLoss"].get<double>(), 2.5);
  EXPECT_EQ(status["completionTime"], "2027-01-15T08:00:00Z");
  bool succeeded_condition = false;
  for (const json& condition : status["conditions"]) {
    if (condition["type"] == "Succeeded") {
      succeeded_condition = condition["status"] == "True";
      EXPECT_EQ(condition["observedGeneration"], 1);
      EXPECT_THAT(condition["message"].get<std::string>(), HasSubstr("train loss 2.5000"));
    }
  }
  EXPECT_TRUE(succeeded_condition);
  EXPECT_THAT(actions.delete_pods, ElementsAre("kjv-worker-0", "kjv-worker-1"));
  EXPECT_FALSE(actions.requeue_after.has_value());
}

TEST(TrainingJobReconcilerTest, SuspendedJobIsCancelledAndItsPodsDeleted) {
  json job = Submitted(Job(), "Running");
  job["spec"]["runPolicy"]["suspend"] = true;
  ObservedWorld world = World(job);
  world.pods = {Pod(0, "Running"), Pod(1, "Running")};
  world.coordinator_job = CoordinatorJob(v1::RUNNING);
  ReconcileActions actions = ReconcileTrainingJob(world, ReconcilerOptions{});
  EXPECT_EQ(actions.cancel, "kjv-01234567-g1");
  EXPECT_THAT(actions.delete_pods, ElementsAre("kjv-worker-0", "kjv-worker-1"));
  EXPECT_THAT(actions.create_pods, IsEmpty());
  EXPECT_FALSE(actions.submit.has_value());
  ASSERT_TRUE(actions.status.has_value());
  EXPECT_EQ((*actions.status)["phase"], "Suspended");
  EXPECT_FALSE(actions.status->contains("coordinatorJob"));
}

TEST(TrainingJobReconcilerTest, ResumingASuspendedJobSubmitsANewGeneration) {
  json job = Job();
  job["metadata"]["generation"] = 3;
  job["status"] = {{"phase", "Suspended"}};
  job["spec"]["checkpoint"] = {{"directory", "/checkpoints/kjv"}, {"interval", 10}};
  ReconcileActions actions = ReconcileTrainingJob(World(job), ReconcilerOptions{});
  ASSERT_TRUE(actions.submit.has_value());
  EXPECT_EQ(actions.submit->name(), "kjv-01234567-g3");
  EXPECT_TRUE(actions.submit->checkpoint().resume());  // from where it was suspended
  EXPECT_EQ((*actions.status)["phase"], "Pending");
  EXPECT_EQ(actions.create_pods.size(), 2u);
}

TEST(TrainingJobReconcilerTest, DeletedJobIsCancelledThenReleased) {
  json job = Submitted(Job(), "Running");
  job["metadata"]["deletionTimestamp"] = "2027-01-15T08:00:00Z";
  ObservedWorld world = World(job);
  world.pods = {Pod(0, "Running")};
  world.coordinator_job = CoordinatorJob(v1::RUNNING);
  ReconcileActions actions = ReconcileTrainingJob(world, ReconcilerOptions{});
  EXPECT_EQ(actions.cancel, "kjv-01234567-g1");
  EXPECT_TRUE(actions.remove_finalizer);
  EXPECT_THAT(actions.delete_pods, ElementsAre("kjv-worker-0"));
  EXPECT_FALSE(actions.status.has_value());
  EXPECT_FALSE(actions.submit.has_value());
  EXPECT_THAT(actions.create_pods, IsEmpty());
}

TEST(TrainingJobReconcilerTest, DeletedJobWhoseCoordinatorJobEndedIsOnlyReleased) {
  json job = Submitted(Job(), "Succeeded");
  job["metadata"]["deletionTimestamp"] = "2027-01-15T08:00:00Z";
  ObservedWorld world = World(job);
  world.coordinator_job = CoordinatorJob(v1::SUCCEEDED);
  ReconcileActions actions = ReconcileTrainingJob(world, ReconcilerOptions{});
  EXPECT_FALSE(actions.cancel.has_value());
  EXPECT_TRUE(actions.remove_finalizer);
}

TEST(TrainingJobReconcilerTest, InvalidSpecFailsNamingTheField) {
  json job = Job();
  job["spec"]["model"]["numLayers"] = 1;  // fewer layers than stages
  ReconcileActions actions = ReconcileTrainingJob(World(job), ReconcilerOptions{});
  ASSERT_TRUE(actions.status.has_value());
  EXPECT_EQ((*actions.status)["phase"], "Failed");
  EXPECT_THAT((*actions.status)["message"].get<std::string>(), HasSubstr("spec.pipeline"));
  EXPECT_FALSE(actions.submit.has_value());
  EXPECT_THAT(actions.create_pods, IsEmpty());
  ASSERT_EQ(actions.events.size(), 1u);
  EXPECT_EQ(actions.events[0].type, "Warning");
}

TEST(TrainingJobReconcilerTest, LostCoordinatorJobIsSubmittedAgainUnderItsName) {
  ObservedWorld world = World(Submitted(Job(), "Running"));
  world.pods = {Pod(0, "Running"), Pod(1, "Running")};
  world.service_exists = true;
  world.network_policy_exists = true;
  ReconcileActions actions = ReconcileTrainingJob(world, ReconcilerOptions{});
  ASSERT_TRUE(actions.submit.has_value());
  EXPECT_EQ(actions.submit->name(), "kjv-01234567-g1");
  EXPECT_THAT(actions.events, IsEmpty());
}

TEST(TrainingJobReconcilerTest, FinishedJobIsDeletedAfterItsTtl) {
  json job = Submitted(Job(), "Succeeded");
  job["spec"]["runPolicy"]["ttlSecondsAfterFinished"] = 60;
  job["status"]["completionTime"] = "2027-01-15T07:58:00Z";  // two minutes before kNow
  EXPECT_TRUE(ReconcileTrainingJob(World(job), ReconcilerOptions{}).delete_job);
  job["status"]["completionTime"] = "2027-01-15T07:59:30Z";
  ReconcileActions waiting = ReconcileTrainingJob(World(job), ReconcilerOptions{});
  EXPECT_FALSE(waiting.delete_job);
  EXPECT_EQ(waiting.requeue_after, absl::Seconds(30));
}

// Level-based: once its status is written, running it again on the same world
// asks for nothing new (what a retried write after a 409 relies on).
TEST(TrainingJobReconcilerTest, ReconcileIsIdempotentOnceItsStatusIsWritten) {
  ObservedWorld world = Observed("Pending", v1::RUNNING);
  ReconcileActions first = ReconcileTrainingJob(world, ReconcilerOptions{});
  ASSERT_TRUE(first.status.has_value());
  world.job["status"] = *first.status;
  world.now += absl::Seconds(5);
  ReconcileActions second = ReconcileTrainingJob(world, ReconcilerOptions{});
  EXPECT_FALSE(second.status.has_value());
  EXPECT_THAT(second.events, IsEmpty());
  EXPECT_THAT(second.create_pods, IsEmpty());
  EXPECT_FALSE(second.submit.has_value());
}

// The controller submits, then reconciles the same world again with the
// coordinator's answer: that second call decides what the answer means.
ObservedWorld Answered(ObservedWorld world, absl::Status submitted) {
  world.submit_result = std::move(submitted);
  return world;
}

TEST(TrainingJobReconcilerTest, AnAcceptedSubmitIsReportedAsBeforeTheAnswer) {
  const ObservedWorld world = World(Job());
  const ReconcileActions asked = ReconcileTrainingJob(world, ReconcilerOptions{});
  ASSERT_TRUE(asked.submit.has_value());
  const ReconcileActions answered =
      ReconcileTrainingJob(Answered(world, absl::OkStatus()), ReconcilerOptions{});
  EXPECT_FALSE(answered.submit.has_value());  // asked once
  EXPECT_EQ(answered.status, asked.status);
  EXPECT_THAT(Reasons(answered), ElementsAre("Submitted"));
  EXPECT_TRUE(answered.retry_error.ok());
  EXPECT_EQ(answered.requeue_after, asked.requeue_after);
  // The same changes as the first call, which the controller has made already.
  EXPECT_EQ(Names(answered.create_pods), Names(asked.create_pods));
  EXPECT_EQ(answered.create_service, asked.create_service);
}

TEST(TrainingJobReconcilerTest, ASubmitTheCoordinatorRefusesFailsTheJob) {
  for (const absl::Status& refused :
       {absl::InvalidArgumentError("coordinator SubmitJob kjv-01234567-g1: bad schedule"),
        absl::AlreadyExistsError("coordinator SubmitJob kjv-01234567-g1: another spec")}) {
    const ReconcileActions actions =
        ReconcileTrainingJob(Answered(World(Job()), refused), ReconcilerOptions{});
    EXPECT_FALSE(actions.submit.has_value());
    ASSERT_TRUE(actions.status.has_value());
    EXPECT_EQ((*actions.status)["phase"], "Failed");
    EXPECT_EQ((*actions.status)["message"], std::string(refused.message()));
    EXPECT_EQ((*actions.status)["coordinatorJob"], "kjv-01234567-g1");
    // Finished like any failed job: its TTL counts from the completion time.
    EXPECT_TRUE(actions.status->contains("completionTime"));
    const json& failed = (*actions.status)["conditions"].back();
    EXPECT_EQ(failed["type"], "Failed");
    EXPECT_EQ(failed["reason"], "SubmitRejected");
    EXPECT_THAT(Reasons(actions), ElementsAre("Submitted", "SubmitRejected"));
    EXPECT_EQ(actions.events[1].type, "Warning");
    EXPECT_TRUE(actions.retry_error.ok());           // for good: no retry
    EXPECT_FALSE(actions.requeue_after.has_value());  // nor polling
  }
}

TEST(TrainingJobReconcilerTest, ASubmitTheCoordinatorCouldNotTakeIsRetriedWithBackoff) {
  const absl::Status unavailable = absl::UnavailableError("coordinator SubmitJob: connection refused");
  const ObservedWorld world = World(Job());
  const ReconcileActions actions =
      ReconcileTrainingJob(Answered(world, unavailable), ReconcilerOptions{});
  EXPECT_FALSE(actions.submit.has_value());
  EXPECT_EQ(actions.retry_error, unavailable);
  // The status says it was submitted: the retry submits under the same name.
  EXPECT_EQ(actions.status, ReconcileTrainingJob(world, ReconcilerOptions{}).status);
}

TEST(TrainingJobReconcilerTest, ARefusedResubmitOfALostJobFailsItToo) {
  ObservedWorld world = World(Submitted(Job(), "Running"));
  world.pods = {Pod(0, "Running"), Pod(1, "Running")};
  world.service_exists = true;
  world.network_policy_exists = true;
  const ReconcileActions actions = ReconcileTrainingJob(
      Answered(world, absl::InvalidArgumentError("no such schedule")), ReconcilerOptions{});
  ASSERT_TRUE(actions.status.has_value());
  EXPECT_EQ((*actions.status)["phase"], "Failed");
  EXPECT_THAT(Reasons(actions), ElementsAre("SubmitRejected"));
}

TEST(TrainingJobReconcilerTest, CoordinatorNamesFitItsLimit) {
  json job = Job();
  job["metadata"]["name"] = std::string(70, 'x');
  const std::string name = CoordinatorJobName(ParseTrainingJob(job));
  EXPECT_LE(name.size(), 63u);
  EXPECT_THAT(name, ::testing::EndsWith("-01234567-g1"));
}

// The coordinator refuses tenants the names of the operator's form
// (common/operator_job_name.h): every name the operator gives has it, cut or
// not, evicted or not, so no tenant can take a TrainingJob's next one first.
TEST(TrainingJobReconcilerTest, CoordinatorNamesHaveTheFormReservedForTheOperator) {
  json job = Job();
  job["metadata"]["uid"] = "9f3c2a1b-77e0-4d2c-a1b2-0123456789ab";
  for (const std::string& base : {std::string("kjv"), std::string(70, 'x'),
                                  std::string(50, 'a') + "-" + std::string(20, 'b')}) {
    for (int64_t generation : {1, 2, 12345}) {
      for (int64_t evictions : {0, 1, 17}) {
        job["metadata"]["name"] = base;
        job["metadata"]["generation"] = generation;
        job["status"]["evictions"] = evictions;
        const std::string name = CoordinatorJobName(ParseTrainingJob(job));
        SCOPED_TRACE(name);
        EXPECT_LE(name.size(), kMaxJobNameLength);
        EXPECT_TRUE(IsOperatorJobName(name));
      }
    }
  }
  job["metadata"]["name"] = "kjv";
  job["metadata"]["generation"] = 3;
  job["status"]["evictions"] = 2;
  EXPECT_EQ(CoordinatorJobName(ParseTrainingJob(job)), "kjv-9f3c2a1b-g3-e2");
}

// spec.initializer.dataset: a job whose dataset prepare-data makes first.
json DatasetJob() {
  json job = Job();
  job["spec"]["data"] = {{"dataset", "/shared/datasets/kjv"}};
  job["spec"]["initializer"]["dataset"] = {
      {"source", json::array({"/shared/texts/", "/shared/more.jsonl.gz"})},
      {"tokenizer", "bpe"},
      {"vocabSize", 400},
      {"textField", "body"},
      {"skipBadLines", true}};
  return job;
}

json DatasetPodIn(const std::string& phase, const std::string& message = "",
                  const std::string& generation = "1") {
  json pod = {{"metadata",
               {{"name", "kjv-dataset"},
                {"labels", {{kJobNameLabel, "kjv"}, {kRoleLabel, kDatasetRole}}},
                {"annotations", {{kGenerationAnnotation, generation}}}}},
              {"status", {{"phase", phase}}}};
  if (phase == "Succeeded" || phase == "Failed") {
    json terminated = {{"exitCode", phase == "Failed" ? 1 : 0},
                       {"reason", phase == "Failed" ? "Error" : "Completed"},
                       {"message", message}};
    json container;
    container["state"]["terminated"] = terminated;
    pod["status"]["containerStatuses"] = json::array({container});
  }
  return pod;
}

const json* ConditionOf(const ReconcileActions& actions, const std::string& type) {
  if (!actions.status) return nullptr;
  for (const json& c : (*actions.status)["conditions"]) {
    if (c["type"] == type) return &c;
  }
  return nullptr;
}

TEST(TrainingJobReconcilerTest, ADatasetInitializerRunsPrepareDataBeforeAnyWorker) {
  ReconcileActions actions = ReconcileTrainingJob(World(DatasetJob()), ReconcilerOptions{});
  ASSERT_THAT(Names(actions.create_pods), ElementsAre("kjv-dataset"));
  EXPECT_FALSE(actions.submit.has_value());
  EXPECT_FALSE(actions.create_service.has_value());
  EXPECT_EQ((*actions.status)["phase"], "Initializing");
  const json* ready = ConditionOf(actions, "DatasetReady");
  ASSERT_NE(ready, nullptr);
  EXPECT_EQ((*ready)["status"], "False");
  EXPECT_EQ((*ready)["reason"], "Preparing");
  EXPECT_THAT(Reasons(actions), ElementsAre("PreparingDataset"));
  ASSERT_TRUE(actions.requeue_after.has_value());

  // The pod: prepare-data of the source into data.dataset, kept when there already,
  // in the worker's image and template, once, its result as its termination message.
  const json& pod = actions.create_pods[0];
  EXPECT_EQ(pod["metadata"]["labels"][kRoleLabel], kDatasetRole);
  EXPECT_EQ(pod["metadata"]["labels"][kJobNameLabel], "kjv");
  EXPECT_FALSE(pod["metadata"]["labels"].contains(kWorkerIndexLabel));
  EXPECT_EQ(pod["metadata"]["annotations"][kGenerationAnnotation], "1");
  EXPECT_EQ(pod["spec"]["restartPolicy"], "Never");
  EXPECT_EQ(pod["spec"]["nodeSelector"]["pool"], "cpu");
  EXPECT_EQ(pod["spec"]["securityContext"]["runAsUser"], kWorkerUid);
  const json& container = pod["spec"]["containers"][0];
  EXPECT_EQ(container["image"], "example/worker:1");
  EXPECT_EQ(container["command"], json::array({"pacictl"}));
  EXPECT_EQ(container["args"],
            json::array({"prepare-data", "/shared/texts/", "/shared/more.jsonl.gz",
                         "--out=/shared/datasets/kjv", "--reuse",
                         "--message_file=/dev/termination-log", "--tokenizer=bpe",
                         "--text_field=body", "--vocab_size=400", "--skip_bad_lines"}));
  EXPECT_EQ(container["terminationMessagePolicy"], "FallbackToLogsOnError");
  json with_json = DatasetJob();
  with_json["spec"]["initializer"]["dataset"] = {{"source", json::array({"/shared/a.jsonl"})},
                                                {"tokenizerJson", "/shared/tokenizer.json"}};
  EXPECT_EQ(DatasetPod(ParseTrainingJob(with_json), ReconcilerOptions{})["spec"]["containers"][0]["args"],
            json::array({"prepare-data", "/shared/a.jsonl", "--out=/shared/datasets/kjv", "--reuse",
                         "--message_file=/dev/termination-log",
                         "--tokenizer_json=/shared/tokenizer.json"}));
  EXPECT_EQ(container["securityContext"]["readOnlyRootFilesystem"], true);
  EXPECT_FALSE(container.contains("ports"));

  // Running: still no worker, its progress in the condition.
  ObservedWorld world = World(DatasetJob());
  world.job["status"] = *actions.status;
  world.pods = {DatasetPodIn("Running")};
  world.dataset_progress = "tokenizing [#####-----] 50% 1.0/2.0 MB";
  actions = ReconcileTrainingJob(world, ReconcilerOptions{});
  EXPECT_THAT(actions.create_pods, IsEmpty());
  EXPECT_THAT(actions.delete_pods, IsEmpty());
  EXPECT_FALSE(actions.submit.has_value());
  EXPECT_THAT(Reasons(actions), IsEmpty());  // one PreparingDataset Event, not one a poll
  ASSERT_NE(ConditionOf(actions, "DatasetReady"), nullptr);
  EXPECT_EQ((*ConditionOf(actions, "DatasetReady"))["message"],
            "pod kjv-dataset: tokenizing [#####-----] 50% 1.0/2.0 MB");

  // Succeeded: ready, with what prepare-data said; then the workers and the submit.
  world.job["status"] = *actions.status;
  world.pods = {DatasetPodIn("Succeeded", "wrote /shared/datasets/kjv: 3 shards, 1,000 tokens\n")};
  actions = ReconcileTrainingJob(world, ReconcilerOptions{});
  ASSERT_NE(ConditionOf(actions, "DatasetReady"), nullptr);
  EXPECT_EQ((*ConditionOf(actions, "DatasetReady"))["status"], "True");
  EXPECT_EQ((*ConditionOf(actions, "DatasetReady"))["message"],
            "wrote /shared/datasets/kjv: 3 shards, 1,000 tokens");
  EXPECT_THAT(Names(actions.create_pods), ElementsAre("kjv-worker-0", "kjv-worker-1"));
  EXPECT_THAT(actions.delete_pods, IsEmpty());  // its pod stays, for kubectl logs
  ASSERT_TRUE(actions.submit.has_value());
  EXPECT_EQ(actions.submit->data().dataset(), "/shared/datasets/kjv");
  EXPECT_EQ((*actions.status)["phase"], "Pending");
  EXPECT_THAT(Reasons(actions), ElementsAre("DatasetPrepared", "Submitted"));

  // Ready at this generation: not asked again, even with its pod gone (a resume).
  world.job["status"] = *actions.status;
  world.job["status"].erase("coordinatorJob");
  world.job["status"]["phase"] = "Suspended";
  world.pods = {};
  actions = ReconcileTrainingJob(world, ReconcilerOptions{});
  EXPECT_THAT(Names(actions.create_pods), ElementsAre("kjv-worker-0", "kjv-worker-1"));
  EXPECT_TRUE(actions.submit.has_value());
}

TEST(TrainingJobReconcilerTest, AFailedDatasetFailsTheJobWithItsErrorAndAFixedSpecPreparesAgain) {
  ObservedWorld world = World(DatasetJob());
  world.job["status"] = {{"phase", "Initializing"}};
  world.pods = {DatasetPodIn("Failed", "prepare-data: /shared/more.jsonl.gz:7: not JSON\n")};
  ReconcileActions actions = ReconcileTrainingJob(world, ReconcilerOptions{});
  EXPECT_EQ((*actions.status)["phase"], "Failed");
  EXPECT_EQ((*actions.status)["message"],
            "the dataset initializer (pod kjv-dataset, Error, exit code 1) failed: prepare-data: "
            "/shared/more.jsonl.gz:7: not JSON");
  EXPECT_EQ((*ConditionOf(actions, "Failed"))["reason"], "DatasetFailed");
  EXPECT_EQ((*ConditionOf(actions, "DatasetReady"))["reason"], "Failed");
  EXPECT_FALSE(actions.submit.has_value());
  EXPECT_THAT(actions.create_pods, IsEmpty());
  EXPECT_THAT(Reasons(actions), ElementsAre("DatasetFailed"));
  // Finished, the job keeps its dataset pod (its log) while it stops its workers.
  world.job["status"] = *actions.status;
  world.pods.push_back(Pod(0, "Running"));
  const ReconcileActions finished = ReconcileTrainingJob(world, ReconcilerOptions{});
  EXPECT_THAT(finished.delete_pods, ElementsAre("kjv-worker-0"));
  world.pods.pop_back();

  // Applied again, fixed (generation 2): the pod of generation 1 goes, then a new one runs.
  world.job["status"] = *actions.status;
  world.job["metadata"]["generation"] = 2;
  world.job["spec"]["initializer"]["dataset"]["skipBadLines"] = true;
  actions = ReconcileTrainingJob(world, ReconcilerOptions{});
  EXPECT_THAT(actions.delete_pods, ElementsAre("kjv-dataset"));
  EXPECT_THAT(actions.create_pods, IsEmpty());
  EXPECT_EQ((*actions.status)["phase"], "Initializing");
  world.job["status"] = *actions.status;
  world.pods = {};
  actions = ReconcileTrainingJob(world, ReconcilerOptions{});
  ASSERT_THAT(Names(actions.create_pods), ElementsAre("kjv-dataset"));
  EXPECT_EQ(actions.create_pods[0]["metadata"]["annotations"][kGenerationAnnotation], "2");
}

TEST(TrainingJobReconcilerTest, ADatasetPodThatCannotStartSaysWhyAndADatasetNeedsItsFolder) {
  ObservedWorld world = World(DatasetJob());
  world.job["status"] = {{"phase", "Initializing"}};
  json pod = DatasetPodIn("Pending");
  json container;
  container["state"]["waiting"] = {{"reason", "ImagePullBackOff"}, {"message", "no such image"}};
  pod["status"]["containerStatuses"] = json::array({container});
  world.pods = {pod};
  ReconcileActions actions = ReconcileTrainingJob(world, ReconcilerOptions{});
  EXPECT_EQ((*ConditionOf(actions, "DatasetReady"))["reason"], "ImagePullBackOff");
  EXPECT_EQ((*ConditionOf(actions, "DatasetReady"))["message"],
            "pod kjv-dataset: ImagePullBackOff: no such image");

  json job = DatasetJob();
  job["spec"]["data"] = {{"corpusPath", "corpus.txt"}};
  actions = ReconcileTrainingJob(World(job), ReconcilerOptions{});
  EXPECT_EQ((*actions.status)["phase"], "Failed");
  EXPECT_THAT((*actions.status)["message"].get<std::string>(),
              HasSubstr("spec.initializer.dataset: it writes spec.data.dataset"));
  job = DatasetJob();
  job["spec"]["initializer"]["dataset"]["source"] = json::array();
  actions = ReconcileTrainingJob(World(job), ReconcilerOptions{});
  EXPECT_THAT((*actions.status)["message"].get<std::string>(),
              HasSubstr("spec.initializer.dataset.source: "));
}

}  // namespace
}  // namespace paci::op
