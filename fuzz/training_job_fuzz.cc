// A TrainingJob as the API server hands it to the operator: any bytes, parsed
// as JSON and reconciled against a world with no pods and no coordinator job.
// The reconciler must decide something for every object (submit, fail with a
// reason, or wait), never crash; a job whose spec cannot run must not be
// submitted.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "absl/time/time.h"
#include "operator/reconcile/training_job_reconciler.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json job =
      nlohmann::json::parse(data, data + size, /*cb=*/nullptr, /*allow_exceptions=*/false);
  if (job.is_discarded()) return 0;
  paci::op::ObservedWorld world;
  world.job = job;
  world.now = absl::FromUnixSeconds(1'800'000'000);
  const paci::op::ReconcileActions actions =
      paci::op::ReconcileTrainingJob(world, paci::op::ReconcilerOptions{});
  if (actions.submit.has_value()) {
    // What is submitted is what JobSpecFromTrainingJob accepts.
    const paci::op::TrainingJob typed = paci::op::ParseTrainingJob(job);
    if (!paci::op::JobSpecFromTrainingJob(typed, actions.submit->name()).ok()) std::abort();
  }
  // The answer to a submit, fed back, must be decided as well.
  world.submit_result = absl::InvalidArgumentError("refused");
  paci::op::ReconcileTrainingJob(world, paci::op::ReconcilerOptions{});
  return 0;
}
