#include "tools/kube_logs.h"

#include <cstdlib>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "kube/object.h"
#include "operator/api/training_job.h"
#include "tools/kube_job.h"

namespace paci {

using nlohmann::json;

std::string KubeconfigPath(const std::string& flag) {
  if (!flag.empty()) return flag;
  if (const char* list = std::getenv("KUBECONFIG"); list != nullptr && *list != '\0') {
    return std::string(*absl::StrSplit(list, ':').begin());
  }
  const char* home = std::getenv("HOME");
  return absl::StrCat(home != nullptr ? home : "", "/.kube/config");
}

absl::StatusOr<std::string> PodOfRequest(const op::TrainingJob& job,
                                         const LogsRequest& request) {
  const std::string& name = job.metadata.name;
  if (request.dataset) return op::DatasetPodName(name);
  const v1::PipelineSpec pipeline = job.spec.job.ok() ? job.spec.job->pipeline() : v1::PipelineSpec();
  const int64_t stages = std::max(pipeline.num_stages(), 1);
  const int64_t replicas = std::max(pipeline.data_parallel(), 1);
  if (request.stage < 0 || request.stage >= stages) {
    return absl::InvalidArgumentError(absl::StrCat("--stage: ", request.stage,
                                                   " is not a stage of ", name, ", which has ",
                                                   stages, " (0 to ", stages - 1, ")"));
  }
  if (request.replica < 0 || request.replica >= replicas) {
    return absl::InvalidArgumentError(absl::StrCat("--replica: ", request.replica,
                                                   " is not a replica of ", name, ", which has ",
                                                   replicas));
  }
  for (const op::StageStatus& stage : job.status.stages.value_or(std::vector<op::StageStatus>{})) {
    if (stage.stage == request.stage && stage.replica == request.replica && !stage.pod.empty()) {
      return stage.pod;
    }
  }
  const std::string& phase = job.status.phase;
  return absl::FailedPreconditionError(absl::StrCat(
      "no pod runs stage ", request.stage, " replica ", request.replica, " of ", name,
      " yet (phase ", phase.empty() ? "none" : phase,
      "); its worker pods are labelled paci.dev/job-name=", name));
}

namespace {

// The API path of the request's pod log, with its query.
absl::StatusOr<std::string> LogPath(kube::KubeClient& kube, const LogsRequest& request,
                                    bool follow) {
  const std::string ns =
      request.namespace_.empty() ? kube.options().default_namespace : request.namespace_;
  absl::StatusOr<op::TrainingJob> job = GetTrainingJob(kube, ns, request.job);
  if (!job.ok()) return job.status();
  absl::StatusOr<std::string> pod = PodOfRequest(*job, request);
  if (!pod.ok()) return pod.status();
  std::vector<std::string> query;
  if (request.tail_lines > 0) query.push_back(absl::StrCat("tailLines=", request.tail_lines));
  if (follow) query.push_back("follow=true");
  return absl::StrCat(kube::CollectionPath("", "v1", ns, "pods"), "/", *pod, "/log",
                      query.empty() ? "" : "?", absl::StrJoin(query, "&"));
}

}  // namespace

absl::StatusOr<std::string> ReadLogs(kube::KubeClient& kube, const LogsRequest& request) {
  absl::StatusOr<std::string> path = LogPath(kube, request, /*follow=*/false);
  if (!path.ok()) return path.status();
  return kube.GetText(*path);
}

absl::Status FollowLogs(kube::KubeClient& kube, const LogsRequest& request,
                        const std::function<void(std::string_view)>& on_data) {
  absl::StatusOr<std::string> path = LogPath(kube, request, /*follow=*/true);
  if (!path.ok()) return path.status();
  // A stage may say nothing for a long while: only a day of silence ends it.
  return kube.Stream(*path, absl::Hours(24), [&](std::string_view data) {
    on_data(data);
    return true;
  });
}

}  // namespace paci
