#pragma once

// `pacictl logs TRAININGJOB`: the log of one of a TrainingJob's pods, read
// through the API server's pods/log as kubectl logs reads it (the kubeconfig
// as kubectl finds it). The pod of a stage is the one its .status.stages[]
// names: the coordinator places stages on any of the job's worker pods.

#include <functional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "absl/status/statusor.h"
#include "operator/api/training_job.h"
#include "kube/kube_client.h"

namespace paci {

struct LogsRequest {
  std::string job;        // the TrainingJob's name
  std::string namespace_;  // empty: the kubeconfig's namespace
  int stage = 0;
  int replica = 0;
  bool dataset = false;  // the dataset initializer's pod instead of a stage's
  int tail_lines = 0;    // 0: the whole log
};

// The kubeconfig kubectl would read: `flag` when given, else the first file of
// $KUBECONFIG, else ~/.kube/config.
std::string KubeconfigPath(const std::string& flag);

// The pod of `request` in `job` (a TrainingJob as the API server has it):
// "<job>-dataset" for the dataset, else the pod .status.stages[] names for the
// stage and replica. InvalidArgument naming --stage or --replica outside the
// job's pipeline; FailedPrecondition when no pod runs it yet (the job's phase).
absl::StatusOr<std::string> PodOfRequest(const op::TrainingJob& job,
                                         const LogsRequest& request);

// The log text of the request's pod. NotFound naming the TrainingJob when there
// is none; the API server's refusal otherwise.
absl::StatusOr<std::string> ReadLogs(kube::KubeClient& kube, const LogsRequest& request);

// The same, followed: the log so far, then what the pod writes, handed to
// `on_data` until the pod's container ends (OK). Errors as ReadLogs's.
absl::Status FollowLogs(kube::KubeClient& kube, const LogsRequest& request,
                        const std::function<void(std::string_view)>& on_data);

}  // namespace paci
