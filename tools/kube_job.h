#pragma once

// A TrainingJob as the API server has it, for pacictl: `get trainingjob/NAME`
// and `watch trainingjob/NAME` (its status mirrors the coordinator's job and
// says what the operator waits for), and the object `logs` reads its pods
// from. The kubeconfig as kubectl finds it (KubeconfigPath in kube_logs.h).

#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kube/kube_client.h"
#include "operator/api/training_job.h"
#include "tools/progress_printer.h"

namespace paci {

// NAME of "trainingjob/NAME" (also "trainingjobs/", "tj/", as kubectl spells
// a resource); nullopt for any other argument (a coordinator job's name).
std::optional<std::string> TrainingJobName(std::string_view argument);

// The TrainingJob `name` in `ns` (empty: the kubeconfig's namespace). NotFound
// naming the TrainingJob and namespace when there is none.
absl::StatusOr<op::TrainingJob> GetTrainingJob(kube::KubeClient& kube, const std::string& ns,
                                               const std::string& name);

// `pacictl get trainingjob/NAME`: phase, why (the conditions' reasons and
// messages), progress, losses, drift, the coordinator's job, the stages' pods.
std::string FormatTrainingJob(const op::TrainingJob& job, absl::Time now);

// The live progress line's view of a TrainingJob's status (the ETA from its
// startTime and step rate, as of `now`).
ProgressView ViewOfTrainingJob(const op::TrainingJob& job, absl::Time now);

// "Running", or "Failed: InvalidSpec: spec.pipeline...": the phase and, when
// the status gives them, the reason of the condition that is not met and the
// message. What `watch` prints when it changes.
std::string PhaseLine(const op::TrainingJobStatus& status);

// Whether the TrainingJob has ended (Succeeded, Failed, Cancelled); whether
// it succeeded.
bool TrainingJobFinished(const op::TrainingJobStatus& status);
bool TrainingJobSucceeded(const op::TrainingJobStatus& status);

// Hands `on_change` the TrainingJob now and each version the API server
// stores after it, until it has ended: returns that last version. A watch the
// server ends, or one too old to resume (410), is started again. NotFound when
// it is deleted (or never was).
absl::StatusOr<op::TrainingJob> WatchTrainingJob(
    kube::KubeClient& kube, const std::string& ns, const std::string& name,
    const std::function<void(const op::TrainingJob&)>& on_change);

}  // namespace paci
