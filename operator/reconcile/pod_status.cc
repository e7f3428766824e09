#include "operator/reconcile/pod_status.h"

#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "kube/object.h"
#include "operator/api/training_job.h"

namespace paci::op {

using nlohmann::json;
using kube::Field;
using kube::IntField;
using kube::StringField;

std::pair<std::string, std::string> PodTrouble(const json& pod) {
  // The kubelet's waiting reasons that do not pass by themselves (pkg/kubelet/images and
  // kuberuntime): ErrImageNeverPull is what a real kubelet says of an image that is not on
  // the node under imagePullPolicy Never.
  static const std::set<std::string> kWaiting = {
      "ErrImagePull",       "ImagePullBackOff",     "ErrImageNeverPull",
      "InvalidImageName",   "ImageInspectError",    "CrashLoopBackOff",
      "CreateContainerConfigError", "CreateContainerError", "RunContainerError"};
  const json& status = Field(pod, "status");
  const json& containers = Field(status, "containerStatuses");
  if (containers.is_array()) {
    for (const json& container : containers) {
      const json& waiting = Field(Field(container, "state"), "waiting");
      const std::string reason = StringField(waiting, "reason");
      if (kWaiting.count(reason) != 0) return {reason, StringField(waiting, "message")};
    }
  }
  const json& conditions = Field(status, "conditions");
  if (conditions.is_array()) {
    for (const json& condition : conditions) {
      if (StringField(condition, "type") == "PodScheduled" &&
          StringField(condition, "status") == "False" &&
          StringField(condition, "reason") == "Unschedulable") {
        return {"Unschedulable", StringField(condition, "message")};
      }
    }
  }
  return {};
}

std::string HowItEnded(const json& pod) {
  const json& containers = Field(Field(pod, "status"), "containerStatuses");
  if (!containers.is_array()) return "";
  for (const json& container : containers) {
    const json& terminated = Field(Field(container, "state"), "terminated");
    if (!terminated.is_object()) continue;
    const std::string reason = StringField(terminated, "reason");
    return absl::StrCat(", ", reason.empty() ? "terminated" : reason, ", exit code ",
                        IntField(terminated, "exitCode", 0));
  }
  return "";
}

std::string TerminationMessage(const json& pod) {
  const json& containers = Field(Field(pod, "status"), "containerStatuses");
  if (!containers.is_array()) return "";
  for (const json& container : containers) {
    const std::string message =
        StringField(Field(Field(container, "state"), "terminated"), "message");
    const absl::string_view trimmed = absl::StripTrailingAsciiWhitespace(message);
    if (!trimmed.empty()) return std::string(trimmed);
  }
  return "";
}

}  // namespace paci::op
