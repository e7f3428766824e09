#include "operator/api/worker_template.h"

#include <algorithm>
#include <iterator>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/dns_label.h"
#include "common/status_macros.h"
#include "kube/object.h"
#include "operator/api/training_job.h"

namespace paci::op {

using kube::Field;
using kube::StringField;
namespace {

using nlohmann::json;

constexpr char kWorkerField[] = "spec.worker";
// The env variables the operator sets from the downward API (job_objects.cc).
constexpr const char* kOwnEnv[] = {"POD_NAME", "POD_NAMESPACE", "POD_IP"};

absl::Status Invalid(const std::string& field, const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat(kWorkerField, ".", field, ": ", message));
}

std::string Indexed(const char* list, size_t index) {
  return absl::StrCat(list, "[", index, "]");
}

// The labels the operator sets on the pods it builds (job_objects.cc).
std::set<std::string> OwnLabels() {
  return {kJobNameLabel, kRoleLabel, kWorkerIndexLabel, "paci.dev/trainingjob",
          "app.kubernetes.io/name"};
}

// Pod Security's restricted profile (as Kubernetes v1.34 defines it) for the
// fields a TrainingJob may set: whoever may create a TrainingJob must not get
// a privileged pod, root, host volumes or another identity's token through it.
constexpr const char* kAllowedVolumeKinds[] = {"configMap", "csi", "downwardAPI", "emptyDir",
                                               "ephemeral", "persistentVolumeClaim",
                                               "projected", "secret"};
constexpr const char* kSafeSysctls[] = {
    "kernel.shm_rmid_forced",       "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start", "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",  "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl", "net.ipv4.tcp_keepalive_probes"};

bool IsTrue(const json& object, const char* key) {
  return object.is_object() && object.contains(key) && object[key].is_boolean() &&
         object[key].get<bool>();
}
bool IsFalse(const json& object, const char* key) {
  return object.is_object() && object.contains(key) && object[key].is_boolean() &&
         !object[key].get<bool>();
}

// What a container's and the pod's security contexts share: user, seccomp,
// SELinux and AppArmor. `field` is "securityContext" or "podSecurityContext".
absl::Status RestrictedIdentity(const json& context, const std::string& field) {
  if (IsFalse(context, "runAsNonRoot")) {
    return Invalid(field + ".runAsNonRoot", "must not be false: workers never run as root");
  }
  const json& uid = Field(context, "runAsUser");
  if (uid.is_number_integer() && uid.get<int64_t>() == 0) {
    return Invalid(field + ".runAsUser", "must not be 0: workers never run as root");
  }
  const std::string seccomp = StringField(Field(context, "seccompProfile"), "type");
  if (!seccomp.empty() && seccomp != "RuntimeDefault" && seccomp != "Localhost") {
    return Invalid(field + ".seccompProfile.type",
                   absl::StrCat("\"", seccomp, "\": only RuntimeDefault or Localhost"));
  }
  const json& selinux = Field(context, "seLinuxOptions");
  const std::string type = StringField(selinux, "type");
  if (!type.empty() && type != "container_t" && type != "container_init_t" &&
      type != "container_kvm_t") {
    return Invalid(field + ".seLinuxOptions.type",
                   absl::StrCat("\"", type,
                                "\": only container_t, container_init_t or container_kvm_t"));
  }
  for (const char* key : {"user", "role"}) {
    if (!StringField(selinux, key).empty()) {
      return Invalid(absl::StrCat(field, ".seLinuxOptions.", key), "must not be set");
    }
  }
  if (StringField(Field(context, "appArmorProfile"), "type") == "Unconfined") {
    return Invalid(field + ".appArmorProfile.type", "must not be Unconfined");
  }
  if (IsTrue(Field(context, "windowsOptions"), "hostProcess")) {
    return Invalid(field + ".windowsOptions.hostProcess", "must not be true");
  }
  return absl::OkStatus();
}

absl::Status RestrictedSecurity(const json& worker) {
  const json& container = Field(worker, "securityContext");
  RETURN_IF_ERROR(RestrictedIdentity(container, "securityContext"));
  if (IsTrue(container, "privileged")) {
    return Invalid("securityContext.privileged", "must not be true");
  }
  if (IsTrue(container, "allowPrivilegeEscalation")) {
    return Invalid("securityContext.allowPrivilegeEscalation", "must not be true");
  }
  const std::string proc_mount = StringField(container, "procMount");
  if (!proc_mount.empty() && proc_mount != "Default") {
    return Invalid("securityContext.procMount", absl::StrCat("\"", proc_mount, "\": only Default"));
  }
  if (container.is_object() && container.contains("capabilities")) {
    // It replaces the operator's {drop: [ALL]} whole, so it must say so too.
    const json& capabilities = container["capabilities"];
    const json& drop = Field(capabilities, "drop");
    if (!drop.is_array() || std::find(drop.begin(), drop.end(), "ALL") == drop.end()) {
      return Invalid("securityContext.capabilities.drop", "must include \"ALL\"");
    }
    const json& add = Field(capabilities, "add");
    if (add.is_array()) {
      for (size_t i = 0; i < add.size(); ++i) {
        if (add[i] != "NET_BIND_SERVICE") {
          return Invalid(Indexed("securityContext.capabilities.add", i),
                         absl::StrCat(add[i].dump(), ": only NET_BIND_SERVICE may be added"));
        }
      }
    }
  }
  const json& pod = Field(worker, "podSecurityContext");
  RETURN_IF_ERROR(RestrictedIdentity(pod, "podSecurityContext"));
  const json& sysctls = Field(pod, "sysctls");
  if (sysctls.is_array()) {
    for (size_t i = 0; i < sysctls.size(); ++i) {
      const std::string name = StringField(sysctls[i], "name");
      if (std::find(std::begin(kSafeSysctls), std::end(kSafeSysctls), name) ==
          std::end(kSafeSysctls)) {
        return Invalid(Indexed("podSecurityContext.sysctls", i) + ".name",
                       absl::StrCat("\"", name, "\" is not a namespaced safe sysctl"));
      }
    }
  }
  return absl::OkStatus();
}

// A Secret a worker template names (`field` says where): only one of
// `allowed`, the Secrets the operator's --worker_allowed_secrets lists. The
// namespace's other Secrets (the workers' certificate, each job's token, the
// users' certificate, whatever else lives there) stay out of reach of whoever
// writes a TrainingJob.
absl::Status AllowedSecret(const std::string& name, const std::string& field,
                           const std::set<std::string>& allowed) {
  if (allowed.count(name) != 0) return absl::OkStatus();
  return Invalid(field, absl::StrCat(
      "Secret \"", name, "\" is not one a worker may use: ",
      allowed.empty() ? std::string("the operator allows none")
                      : absl::StrCat("the operator allows ", absl::StrJoin(allowed, ", ")),
      " (its --worker_allowed_secrets, the chart's worker.allowedSecrets)"));
}

// A volume has its name and one source of the closed list; a projected one
// no service-account token (the pod's identity is the operator's choice);
// every Secret it names is allowed.
absl::Status RestrictedVolume(const json& volume, size_t index,
                              const std::set<std::string>& allowed_secrets) {
  const std::string field = Indexed("volumes", index);
  if (!volume.is_object()) return Invalid(field, "not an object");
  for (auto it = volume.begin(); it != volume.end(); ++it) {
    if (it.key() == "name") continue;
    if (std::find_if(std::begin(kAllowedVolumeKinds), std::end(kAllowedVolumeKinds),
                     [&](const char* kind) { return it.key() == kind; }) ==
        std::end(kAllowedVolumeKinds)) {
      return Invalid(field, absl::StrCat(it.key(), " volumes are not allowed: a worker's are ",
                                         absl::StrJoin(kAllowedVolumeKinds, ", "),
                                         " (Pod Security's restricted profile)"));
    }
  }
  if (volume.contains("secret")) {
    RETURN_IF_ERROR(AllowedSecret(StringField(Field(volume, "secret"), "secretName"),
                                  field + ".secret.secretName", allowed_secrets));
  }
  if (const json& csi = Field(volume, "csi"); csi.is_object() && csi.contains("nodePublishSecretRef")) {
    RETURN_IF_ERROR(AllowedSecret(StringField(Field(csi, "nodePublishSecretRef"), "name"),
                                  field + ".csi.nodePublishSecretRef.name", allowed_secrets));
  }
  const json& sources = Field(Field(volume, "projected"), "sources");
  if (sources.is_array()) {
    for (size_t i = 0; i < sources.size(); ++i) {
      const std::string source = absl::StrCat(field, ".projected.", Indexed("sources", i));
      if (sources[i].is_object() && sources[i].contains("serviceAccountToken")) {
        return Invalid(source, "a serviceAccountToken is not allowed: workers hold no API token");
      }
      if (sources[i].is_object() && sources[i].contains("secret")) {
        RETURN_IF_ERROR(AllowedSecret(StringField(Field(sources[i], "secret"), "name"),
                                      source + ".secret.name", allowed_secrets));
      }
    }
  }
  return absl::OkStatus();
}

// env[].valueFrom.secretKeyRef and envFrom[].secretRef name allowed Secrets only.
absl::Status AllowedEnvSecrets(const json& worker, const std::set<std::string>& allowed_secrets) {
  const json& env = Field(worker, "env");
  if (env.is_array()) {
    for (size_t i = 0; i < env.size(); ++i) {
      const json& from = Field(env[i], "valueFrom");
      if (from.contains("secretKeyRef")) {
        const json& ref = Field(from, "secretKeyRef");
        RETURN_IF_ERROR(AllowedSecret(StringField(ref, "name"),
                                      Indexed("env", i) + ".valueFrom.secretKeyRef.name",
                                      allowed_secrets));
      }
    }
  }
  const json& env_from = Field(worker, "envFrom");
  if (env_from.is_array()) {
    for (size_t i = 0; i < env_from.size(); ++i) {
      if (env_from[i].is_object() && env_from[i].contains("secretRef")) {
        RETURN_IF_ERROR(AllowedSecret(StringField(Field(env_from[i], "secretRef"), "name"),
                                      Indexed("envFrom", i) + ".secretRef.name", allowed_secrets));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateWorkerTemplate(const json& worker,
                                    const std::set<std::string>& allowed_secrets) {
  RETURN_IF_ERROR(RestrictedSecurity(worker));
  RETURN_IF_ERROR(AllowedEnvSecrets(worker, allowed_secrets));
  std::set<std::string> volume_names;
  const json& volumes = Field(worker, "volumes");
  if (volumes.is_array()) {
    for (size_t i = 0; i < volumes.size(); ++i) {
      RETURN_IF_ERROR(RestrictedVolume(volumes[i], i, allowed_secrets));
      const std::string name = StringField(volumes[i], "name");
      const std::string field = Indexed("volumes", i) + ".name";
      if (!IsDnsLabel(name)) {
        return Invalid(field, absl::StrCat("\"", name,
                                           "\" is not a DNS-1123 label (lower-case letters, "
                                           "digits and '-', at most 63)"));
      }
      if (name.rfind(kReservedVolumePrefix, 0) == 0) {
        return Invalid(field, absl::StrCat("\"", name, "\": names starting with \"",
                                           kReservedVolumePrefix, "\" are the operator's"));
      }
      if (!volume_names.insert(name).second) {
        return Invalid(field, absl::StrCat("duplicate volume name \"", name, "\""));
      }
    }
  }
  std::set<std::string> mount_paths;
  const json& mounts = Field(worker, "volumeMounts");
  if (mounts.is_array()) {
    for (size_t i = 0; i < mounts.size(); ++i) {
      const std::string name = StringField(mounts[i], "name");
      const std::string path = StringField(mounts[i], "mountPath");
      if (volume_names.count(name) == 0) {
        return Invalid(Indexed("volumeMounts", i) + ".name",
                       absl::StrCat("no volume named \"", name, "\" in ", kWorkerField,
                                    ".volumes"));
      }
      const std::string path_field = Indexed("volumeMounts", i) + ".mountPath";
      if (path.empty() || path.front() != '/') {
        return Invalid(path_field, absl::StrCat("\"", path, "\" is not an absolute path"));
      }
      if (!mount_paths.insert(path).second) {
        return Invalid(path_field, absl::StrCat("\"", path, "\" is mounted twice"));
      }
    }
  }
  for (const char* map : {"labels", "annotations"}) {
    const json& entries = Field(worker, map);
    if (!entries.is_object()) continue;
    for (const std::string& own : OwnLabels()) {
      if (entries.contains(own)) {
        return Invalid(absl::StrCat(map, "[", own, "]"), "set by the operator; choose another key");
      }
    }
  }
  const json& env = Field(worker, "env");
  if (env.is_array()) {
    for (size_t i = 0; i < env.size(); ++i) {
      const std::string name = StringField(env[i], "name");
      for (const char* own : kOwnEnv) {
        if (name == own) {
          return Invalid(Indexed("env", i) + ".name",
                         absl::StrCat(name, " is set by the operator (downward API)"));
        }
      }
      if (env[i].contains("value") && env[i].contains("valueFrom")) {
        return Invalid(Indexed("env", i), "give value or valueFrom, not both");
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace paci::op
