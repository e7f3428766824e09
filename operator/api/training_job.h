#pragma once

// The TrainingJob's API as the operator and its clients (pacictl) share it:
// the labels and names of the objects a job owns and the phases of its
// status. Pure: names and constants, no I/O.

#include <string>

#include <nlohmann/json.hpp>

namespace paci::op {

// Labels on the pods and Service of a job.
inline constexpr char kJobNameLabel[] = "paci.dev/job-name";
inline constexpr char kRoleLabel[] = "paci.dev/role";
inline constexpr char kWorkerIndexLabel[] = "paci.dev/worker-index";
// kRoleLabel's values: a worker pod's, the dataset initializer's.
inline constexpr char kWorkerRole[] = "worker";
inline constexpr char kDatasetRole[] = "dataset";
// On the dataset initializer's pod: the generation of the TrainingJob it was
// made for.
inline constexpr char kGenerationAnnotation[] = "paci.dev/generation";

// The objects a TrainingJob named `job_name` owns: the headless Service
// "<name>-workers" and the pods "<name>-worker-<index>" it names, each
// labelled with the job's name and the role "worker"; the dataset
// initializer's pod "<name>-dataset" (role "dataset").
std::string WorkerServiceName(const std::string& job_name);
std::string WorkerPodName(const std::string& job_name, int index);
std::string DatasetPodName(const std::string& job_name);
// The Secret holding the job's worker token (common/job_token.h), mounted
// into its worker pods only: "<name>-worker-token".
inline constexpr char kWorkerTokenSecretSuffix[] = "-worker-token";
std::string WorkerTokenSecretName(const std::string& job_name);
nlohmann::json WorkerLabels(const std::string& job_name);

// The phases of .status.
inline constexpr char kPhaseInitializing[] = "Initializing";
inline constexpr char kPhasePending[] = "Pending";
inline constexpr char kPhaseSuspended[] = "Suspended";
inline constexpr char kPhaseRunning[] = "Running";
inline constexpr char kPhaseRestarting[] = "Restarting";
inline constexpr char kPhaseSucceeded[] = "Succeeded";
inline constexpr char kPhaseFailed[] = "Failed";
inline constexpr char kPhaseCancelled[] = "Cancelled";

// Whether `phase` is one a job ends in: Succeeded, Failed or Cancelled.
bool IsFinished(const std::string& phase);

}  // namespace paci::op
