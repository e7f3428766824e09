#include "operator/api/training_job.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace paci::op {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

TEST(TrainingJobApiTest, NamesOfTheObjectsAJobOwns) {
  EXPECT_EQ(WorkerServiceName("kjv"), "kjv-workers");
  EXPECT_EQ(WorkerPodName("kjv", 2), "kjv-worker-2");
  EXPECT_EQ(WorkerLabels("kjv"), json({{kJobNameLabel, "kjv"}, {kRoleLabel, "worker"}}));
}

TEST(TrainingJobApiTest, OnlyTheEndPhasesAreFinished) {
  for (const char* phase : {kPhaseSucceeded, kPhaseFailed, kPhaseCancelled}) {
    EXPECT_TRUE(IsFinished(phase)) << phase;
  }
  for (const char* phase : {kPhaseInitializing, kPhasePending, kPhaseSuspended, kPhaseRunning,
                            kPhaseRestarting, ""}) {
    EXPECT_FALSE(IsFinished(phase)) << phase;
  }
}

// A TrainingJob as the API server returns it: every part the operator reads.
json Example() {
  return json::parse(R"({
    "apiVersion": "paci.dev/v1alpha1", "kind": "TrainingJob",
    "metadata": {"name": "kjv", "namespace": "team-a", "uid": "9f3c2a1b-0000",
                 "resourceVersion": "812", "generation": 3,
                 "creationTimestamp": "2027-01-15T08:00:00Z",
                 "finalizers": ["paci.dev/cancel-at-coordinator"],
                 "labels": {"kueue.x-k8s.io/queue-name": "team-a"}},
    "spec": {
      "model": {"numLayers": 4, "dModel": 64},
      "pipeline": {"numStages": 2, "schedule": "paci"},
      "data": {"dataset": "/data/kjv"},
      "runPolicy": {"suspend": true, "backoffLimit": 2, "activeDeadlineSeconds": 600,
                    "priority": 5, "ttlSecondsAfterFinished": 60},
      "worker": {"image": "paci-worker:1.0", "labels": {"team": "a"}, "shmSize": "1Gi",
                 "env": [{"name": "HF_HOME", "value": "/cache"}],
                 "nodeSelector": {"pool": "cpu"}, "resources": {"requests": {"cpu": "2"}}},
      "initializer": {"dataset": {"source": ["/corpus/kjv.txt"], "vocabSize": 512,
                                  "skipBadLines": true}},
      "parity": {"seeds": [4, 5], "steps": 300}},
    "status": {
      "phase": "Running", "observedGeneration": 3, "coordinatorJob": "kjv-9f3c2a1b-g3",
      "step": 40, "totalSteps": 200, "trainLoss": 2.4101, "tokensPerSecond": 3456,
      "evictions": 1,
      "conditions": [{"type": "Running", "status": "True", "reason": "Training",
                      "message": "attempt 1 on 2 workers", "observedGeneration": 3,
                      "lastTransitionTime": "2027-01-15T08:01:00Z"}],
      "stages": [{"stage": 0, "replica": 0, "pod": "kjv-worker-1", "maxDrift": 1,
                  "driftBound": 1, "idleFraction": 0.123}],
      "parity": {"run": 2, "totalRuns": 4, "specDigest": "00ff",
                 "runs": [{"seed": 4, "role": "job", "coordinatorJob": "kjv-9f3c2a1b-g3-p1",
                           "schedule": "paci", "numStages": 2, "steps": 300, "globalBatch": 12,
                           "driftCorrection": "predict", "warmupSteps": 0,
                           "tokensPerSecond": 3400, "validationLoss": 2.5,
                           "curve": [{"step": 300, "seconds": 9.5, "loss": 2.5}]}]},
      "aFieldOfANewerOperator": {"kept": [1, 2]}}})");
}

TEST(TrainingJobApiTest, ReadsEveryPartOnce) {
  const TrainingJob job = ParseTrainingJob(Example());
  EXPECT_EQ(job.metadata.Key(), "team-a/kjv");
  EXPECT_EQ(job.metadata.generation, 3);
  EXPECT_TRUE(job.metadata.HasFinalizer("paci.dev/cancel-at-coordinator"));
  EXPECT_EQ(job.metadata.Label("kueue.x-k8s.io/queue-name"), "team-a");
  EXPECT_FALSE(job.metadata.being_deleted);
  ASSERT_TRUE(job.spec.job.ok()) << job.spec.job.status();
  EXPECT_EQ(job.spec.job->pipeline().num_stages(), 2);
  EXPECT_EQ(job.spec.job->data().dataset(), "/data/kjv");
  EXPECT_TRUE(job.spec.run_policy.suspend);
  EXPECT_EQ(job.spec.run_policy.backoff_limit, 2);
  EXPECT_EQ(job.spec.run_policy.priority, 5);
  EXPECT_EQ(job.spec.run_policy.ttl_seconds_after_finished, 60);
  EXPECT_EQ(job.spec.worker.image, "paci-worker:1.0");
  EXPECT_EQ(job.spec.worker.labels.at("team"), "a");
  EXPECT_EQ(*job.spec.worker.shm_size, "1Gi");
  EXPECT_EQ(job.spec.worker.env.size(), 1u);
  EXPECT_EQ(job.spec.worker.pod_fields, json({{"nodeSelector", {{"pool", "cpu"}}}}));
  EXPECT_EQ(job.spec.worker.container_fields.count("resources"), 1u);
  ASSERT_TRUE(job.spec.dataset.has_value());
  EXPECT_TRUE(job.spec.initializer_error.ok());
  EXPECT_EQ(job.spec.dataset->source, std::vector<std::string>{"/corpus/kjv.txt"});
  EXPECT_EQ(job.spec.dataset->vocab_size, 512);
  EXPECT_TRUE(job.spec.dataset->skip_bad_lines);
  ASSERT_TRUE(job.spec.parity.has_value());
  EXPECT_EQ(job.spec.parity->seeds, (std::vector<int>{4, 5}));
  EXPECT_EQ(job.spec.parity->steps, 300);
  const TrainingJobStatus& status = job.status;
  EXPECT_EQ(status.phase, kPhaseRunning);
  EXPECT_EQ(status.coordinator_job, "kjv-9f3c2a1b-g3");
  EXPECT_EQ(status.step, 40);
  EXPECT_EQ(status.evictions, 1);
  EXPECT_EQ(status.tokens_per_second, 3456);
  EXPECT_FALSE(status.validation_loss.has_value());
  ASSERT_NE(status.FindCondition("Running"), nullptr);
  EXPECT_EQ(status.FindCondition("Running")->observed_generation, 3);
  ASSERT_TRUE(status.stages.has_value());
  EXPECT_EQ((*status.stages)[0].pod, "kjv-worker-1");
  ASSERT_TRUE(status.parity.has_value() && status.parity->runs.has_value());
  EXPECT_EQ(status.parity->run, 2);
  EXPECT_EQ((*status.parity->runs)[0].curve[0].loss, 2.5);
}

// What is read is written back as it was, the fields this version does not
// know included: an older operator loses nothing of a newer CRD's status.
TEST(TrainingJobApiTest, TheStatusRoundTripsWithItsUnknownFields) {
  const json object = Example();
  const json written = StatusJson(ParseTrainingJob(object).status);
  EXPECT_EQ(written, object["status"]) << written.dump(2);
  EXPECT_EQ(written["aFieldOfANewerOperator"], json({{"kept", {1, 2}}}));
  EXPECT_EQ(StatusJson(ParseTrainingJob(json::object()).status), json::object());
}

TEST(TrainingJobApiTest, ChangesAreWrittenAndAbsentFieldsStayAbsent) {
  TrainingJobStatus status = ParseTrainingJob(Example()).status;
  status.phase = kPhaseSuspended;
  status.coordinator_job.clear();
  status.checkpoint_step = 30;
  status.parity.reset();
  kube::SetCondition(status.conditions, "Suspended", true, "Suspended", "by the user", 3,
                     absl::FromUnixSeconds(0));
  const json written = StatusJson(status);
  EXPECT_EQ(written["phase"], "Suspended");
  EXPECT_FALSE(written.contains("coordinatorJob"));
  EXPECT_FALSE(written.contains("parity"));
  EXPECT_FALSE(written.contains("validationLoss"));
  EXPECT_EQ(written["checkpointStep"], 30);
  EXPECT_EQ(written["conditions"].size(), 2u);
  EXPECT_EQ(written["conditions"][1]["lastTransitionTime"], "1970-01-01T00:00:00Z");
}

// A spec the operator must refuse is still read: the job can then be failed
// naming the field, with its metadata and status as they are.
TEST(TrainingJobApiTest, WhatTheSpecCannotBeIsKeptNamingTheField) {
  json object = Example();
  object["spec"]["pipeline"]["numStagez"] = 2;
  object["spec"]["initializer"]["dataset"]["source"] = json::array({"", "/b"});
  object["spec"]["parity"]["seeds"] = json::array({-1});
  const TrainingJob job = ParseTrainingJob(object);
  EXPECT_EQ(job.spec.job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(job.spec.job.status().message(), HasSubstr("spec: "));
  EXPECT_THAT(job.spec.job.status().message(), HasSubstr("numStagez"));
  EXPECT_EQ(job.spec.initializer_error.message(),
            "spec.initializer.dataset.source[0]: must be a non-empty path");
  EXPECT_THAT(job.spec.parity_error.message(), HasSubstr("spec.parity.seeds: -1 is not a seed"));
  EXPECT_EQ(job.metadata.name, "kjv");
  EXPECT_EQ(job.status.phase, kPhaseRunning);

  object["spec"]["data"].erase("dataset");
  EXPECT_THAT(ParseTrainingJob(object).spec.initializer_error.message(),
              HasSubstr("spec.initializer.dataset: it writes spec.data.dataset"));
  object["spec"]["parity"] = {{"steps", "many"}};
  EXPECT_THAT(ParseTrainingJob(object).spec.parity_error.message(),
              HasSubstr("spec.parity.steps: \"many\" is not a number of steps"));
}

// A status field of the wrong type (hand-edited) reads as absent, and a
// number written with a fraction where the schema has whole numbers reads
// rounded; no read throws.
TEST(TrainingJobApiTest, AStatusOfTheWrongShapeReadsAsAbsent) {
  const json object = json::parse(R"({"metadata": {"name": 7, "finalizers": "x"},
    "spec": [], "status": {"phase": 3, "step": "ten", "tokensPerSecond": 1234.6,
                           "conditions": [{"status": "True"}, 5], "stages": {},
                           "parity": []}})");
  const TrainingJob job = ParseTrainingJob(object);
  EXPECT_EQ(job.metadata.name, "");
  EXPECT_TRUE(job.metadata.finalizers.empty());
  EXPECT_EQ(job.metadata.generation, 1);
  EXPECT_TRUE(job.spec.job.ok());
  EXPECT_EQ(job.status.phase, "");
  EXPECT_FALSE(job.status.step.has_value());
  EXPECT_EQ(job.status.tokens_per_second, 1235);
  EXPECT_TRUE(job.status.conditions.empty());
  EXPECT_FALSE(job.status.stages.has_value());
  EXPECT_FALSE(job.status.parity.has_value());
}

}  // namespace
}  // namespace paci::op
