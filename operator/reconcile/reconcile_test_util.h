#pragma once

// What the reconcile library's tests share: a fixed now, a TrainingJob, a
// world around it, a worker pod, the names of objects, and the reasons of the Events a reconcile gave.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/time/time.h"
#include "kube/object.h"
#include "operator/api/training_job.h"
#include "operator/reconcile/training_job_reconciler.h"

namespace paci::op::test {

inline const absl::Time kNow = absl::FromUnixSeconds(1'800'000'000);

// The TrainingJob "kjv" of team-a: a 4-layer GPT on `stages` stages, 60 steps, a = 2.
inline nlohmann::json Job(int stages = 2) {
  nlohmann::json job = nlohmann::json::parse(R"({
    "apiVersion": "paci.dev/v1alpha1", "kind": "TrainingJob",
    "metadata": {"name": "kjv", "namespace": "team-a", "uid": "0123456789abcdef",
                 "generation": 1, "resourceVersion": "10",
                 "finalizers": ["paci.dev/cancel-at-coordinator"]},
    "spec": {
      "model": {"vocabSize": 80, "numLayers": 4, "dModel": 32, "numHeads": 4, "seqLen": 32},
      "pipeline": {"numStages": 2, "schedule": "paci", "accumulation": 2, "microBatchSize": 4},
      "optimizer": {"lr": 0.003},
      "training": {"steps": 60},
      "data": {"corpusPath": "tests/data/kjv-genesis.txt"},
      "runPolicy": {"backoffLimit": 2},
      "worker": {"image": "example/worker:1", "nodeSelector": {"pool": "cpu"}}
    }})");
  job["spec"]["pipeline"]["numStages"] = stages;
  return job;
}

// `job` observed at kNow, with nothing else in the cluster.
inline ObservedWorld World(nlohmann::json job) {
  ObservedWorld world;
  world.job = std::move(job);
  world.now = kNow;
  return world;
}

// Worker pod `index` of the job "kjv", in `phase`.
inline nlohmann::json Pod(int index, const std::string& phase) {
  return {{"metadata",
           {{"name", "kjv-worker-" + std::to_string(index)},
            {"labels", {{kJobNameLabel, "kjv"}, {kWorkerIndexLabel, std::to_string(index)}}}}},
          {"status", {{"phase", phase}}}};
}

// The metadata.name of each object.
inline std::vector<std::string> Names(const std::vector<nlohmann::json>& objects) {
  std::vector<std::string> names;
  for (const nlohmann::json& object : objects) names.push_back(object["metadata"]["name"]);
  return names;
}

inline std::vector<std::string> Reasons(const ReconcileActions& actions) {
  std::vector<std::string> reasons;
  for (const KubeEvent& event : actions.events) reasons.push_back(event.reason);
  return reasons;
}

}  // namespace paci::op::test
