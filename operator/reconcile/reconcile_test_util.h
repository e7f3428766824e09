#pragma once

// What the reconcile library's tests share: a fixed now, a world around a
// TrainingJob, a worker pod, and the reasons of the Events a reconcile gave.

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/time/time.h"
#include "kube/object.h"
#include "operator/api/training_job.h"
#include "operator/reconcile/training_job_reconciler.h"

namespace paci::op::test {

inline const absl::Time kNow = absl::FromUnixSeconds(1'800'000'000);

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

inline std::vector<std::string> Reasons(const ReconcileActions& actions) {
  std::vector<std::string> reasons;
  for (const KubeEvent& event : actions.events) reasons.push_back(event.reason);
  return reasons;
}

}  // namespace paci::op::test
