#include "operator/reconcile/job_objects.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/job_token.h"
#include "operator/reconcile/coordinator_view.h"
#include "operator/reconcile/gang.h"
#include "operator/reconcile/training_job_reconciler.h"

namespace paci::op {

using kube::StringField;
namespace {

using nlohmann::json;

// The operator's own volumes, named with kReservedVolumePrefix (worker_template.h).
constexpr char kTmpVolume[] = "paci-tmp";
constexpr char kShmVolume[] = "paci-shm";
constexpr char kSecretVolume[] = "paci-coordinator";
constexpr char kJobTokenVolume[] = "paci-job-token";

// `defaults` with each key of `overrides` in its place (one level deep, as
// a pod template's securityContext fields are independent settings).
json Merged(json defaults, const json& overrides) {
  if (overrides.is_object()) {
    for (auto it = overrides.begin(); it != overrides.end(); ++it) defaults[it.key()] = it.value();
  }
  return defaults;
}

json WorkerArgs(const TrainingJob& job, const ReconcilerOptions& options) {
  json args = json::array({
      "--coordinator=" + options.worker_coordinator_address,
      std::string("--worker_id=$(POD_NAMESPACE).$(POD_NAME)"),
      absl::StrCat("--labels=", kWorkerJobLabel, "=", WorkerSelectorValue(job.metadata)),
      absl::StrCat("--listen=$(POD_IP):", options.link_port),
      std::string("--advertise_host=$(POD_IP)"),
      absl::StrCat("--metrics_address=$(POD_IP):", options.metrics_port),
  });
  if (!options.worker_secret.empty()) {
    for (const auto& [key, flag] : options.worker_secret_flags) {
      args.push_back(absl::StrCat("--", flag, "=", kWorkerSecretPath, "/", key));
    }
  }
  if (options.worker_link_tls && !options.worker_secret.empty()) {
    for (const auto& [flag, key] : {std::pair{"tls_ca", "ca.crt"}, std::pair{"tls_cert", "tls.crt"},
                                    std::pair{"tls_key", "tls.key"}}) {
      args.push_back(absl::StrCat("--", flag, "=", kWorkerSecretPath, "/", key));
    }
    args.push_back(absl::StrCat("--link_tls_server_name=",
                                WorkerLinkServerName(job.metadata.namespace_name)));
  }
  if (!options.worker_token_key.empty()) {
    args.push_back(absl::StrCat("--job_token_file=", kJobTokenPath, "/token"));
  }
  // The pod serves this job only: its links take no message larger than the job's frames.
  if (absl::StatusOr<v1::JobSpec> spec = JobSpecFromTrainingJob(job, CoordinatorJobName(job)); spec.ok()) {
    args.push_back(absl::StrCat("--max_link_message_bytes=", LargestLinkMessageBytes(*spec)));
  }
  for (const std::string& arg : options.extra_worker_args) args.push_back(arg);
  return args;
}

json WorkerEnv(const WorkerTemplate& worker) {
  json env = json::array({
      {{"name", "POD_NAME"}, {"valueFrom", {{"fieldRef", {{"fieldPath", "metadata.name"}}}}}},
      {{"name", "POD_NAMESPACE"},
       {"valueFrom", {{"fieldRef", {{"fieldPath", "metadata.namespace"}}}}}},
      {{"name", "POD_IP"}, {"valueFrom", {{"fieldRef", {{"fieldPath", "status.podIP"}}}}}},
  });
  for (const json& variable : worker.env) env.push_back(variable);
  return env;
}

bool MountsAt(const json& mounts, const std::string& path) {
  if (!mounts.is_array()) return false;
  for (const json& mount : mounts) {
    if (StringField(mount, "mountPath") == path) return true;
  }
  return false;
}

// Volumes and mounts: the user's, /tmp as an emptyDir unless the user mounts
// something there (the root file system is read-only), /dev/shm as a memory
// emptyDir of shmSize when that is set (and the user mounts nothing there),
// the worker Secret, and `token_secret` (the job's worker token) when given.
void AddVolumes(const WorkerTemplate& worker, const ReconcilerOptions& options,
                const std::string& token_secret, json& pod_spec, json& container) {
  json volumes = worker.volumes;
  json mounts = worker.volume_mounts;
  if (!MountsAt(mounts, "/tmp")) {
    volumes.push_back({{"name", kTmpVolume}, {"emptyDir", json::object()}});
    mounts.push_back({{"name", kTmpVolume}, {"mountPath", "/tmp"}});
  }
  if (worker.shm_size && !MountsAt(mounts, "/dev/shm")) {
    volumes.push_back(
        {{"name", kShmVolume},
         {"emptyDir", {{"medium", "Memory"}, {"sizeLimit", *worker.shm_size}}}});
    mounts.push_back({{"name", kShmVolume}, {"mountPath", "/dev/shm"}});
  }
  if (!options.worker_secret.empty()) {
    volumes.push_back({{"name", kSecretVolume},
                       {"secret", {{"secretName", options.worker_secret}, {"defaultMode", 0440}}}});
    mounts.push_back(
        {{"name", kSecretVolume}, {"mountPath", kWorkerSecretPath}, {"readOnly", true}});
  }
  if (!token_secret.empty()) {
    volumes.push_back({{"name", kJobTokenVolume},
                       {"secret", {{"secretName", token_secret}, {"defaultMode", 0440}}}});
    mounts.push_back({{"name", kJobTokenVolume}, {"mountPath", kJobTokenPath}, {"readOnly", true}});
  }
  pod_spec["volumes"] = volumes;
  container["volumeMounts"] = mounts;
}

// Whether spec.runtime puts any stage on a GPU: device, or an entry of
// stageDevices, is cuda or cuda:N (the CRD's pattern allows nothing else).
bool WantsCuda(const TrainingJobSpec& spec) {
  if (!spec.job.ok()) return false;
  const v1::RuntimeSpec& runtime = spec.job->runtime();
  if (absl::StartsWith(runtime.device(), "cuda")) return true;
  return std::any_of(runtime.stage_devices().begin(), runtime.stage_devices().end(),
                     [](const std::string& device) { return absl::StartsWith(device, "cuda"); });
}

// The image: the TrainingJob's, else the CUDA worker's where a stage is on a
// GPU, else the CPU worker's.
std::string WorkerImage(const TrainingJobSpec& spec, const ReconcilerOptions& options) {
  if (!spec.worker.image.empty()) return spec.worker.image;
  return WantsCuda(spec) ? options.default_worker_cuda_image : options.default_worker_image;
}

json OwnerReference(const ObjectMeta& job) {
  return json::array({{{"apiVersion", "paci.dev/v1alpha1"},
                       {"kind", "TrainingJob"},
                       {"name", job.name},
                       {"uid", job.uid},
                       {"controller", true},
                       {"blockOwnerDeletion", true}}});
}

}  // namespace

json OwnedMetadata(const ObjectMeta& job, const std::string& name) {
  return {{"name", name},
          {"namespace", job.namespace_name},
          {"labels", WorkerLabels(job.name)},
          {"ownerReferences", OwnerReference(job)}};
}

std::string WorkerLinkServerName(const std::string& ns) { return "paci-worker." + ns; }

json WorkerTokenSecret(const TrainingJob& job, const ReconcilerOptions& options) {
  return {{"apiVersion", "v1"},
          {"kind", "Secret"},
          {"metadata", OwnedMetadata(job.metadata, WorkerTokenSecretName(job.metadata.name))},
          {"type", "Opaque"},
          {"stringData", {{"token", JobToken(options.worker_token_key, job.metadata.uid)}}}};
}

json WorkerService(const TrainingJob& job, const ReconcilerOptions& options) {
  const std::string& name = job.metadata.name;
  return {{"apiVersion", "v1"},
          {"kind", "Service"},
          {"metadata", OwnedMetadata(job.metadata, WorkerServiceName(name))},
          {"spec",
           {{"clusterIP", "None"},
            {"selector", {{kJobNameLabel, name}}},
            {"publishNotReadyAddresses", true},
            {"ports",
             json::array({{{"name", "link"}, {"port", options.link_port}},
                          {{"name", "metrics"}, {"port", options.metrics_port}}})}}}};
}

json WorkerNetworkPolicy(const TrainingJob& job, const ReconcilerOptions& options) {
  const std::string& name = job.metadata.name;
  const json this_job = {{"matchLabels", {{kJobNameLabel, name}}}};
  return {{"apiVersion", "networking.k8s.io/v1"},
          {"kind", "NetworkPolicy"},
          {"metadata", OwnedMetadata(job.metadata, WorkerServiceName(name))},
          {"spec",
           {{"podSelector", this_job},
            {"policyTypes", json::array({"Ingress"})},
            {"ingress",
             json::array({{{"from", json::array({{{"podSelector", this_job}}})}},
                          {{"ports", json::array({{{"protocol", "TCP"},
                                                   {"port", options.metrics_port}}})}}})}}}};
}

namespace {

// A pod of spec.worker's template running `container` (its name, image,
// command, args, env and ports set here): the user's resources, pull policy,
// envFrom, volumes and scheduling, the restricted security defaults under the
// user's overrides, /tmp, and the operator's labels for `role`.
json TemplatePod(const TrainingJob& job, const std::string& pod_name, const char* role,
                 json container, const ReconcilerOptions& options) {
  const WorkerTemplate& worker = job.spec.worker;
  const std::string& name = job.metadata.name;
  container["securityContext"] = Merged({{"allowPrivilegeEscalation", false},
                                         {"readOnlyRootFilesystem", true},
                                         {"capabilities", {{"drop", json::array({"ALL"})}}}},
                                        worker.security_context);
  container.update(worker.container_fields);
  json pod_spec = {
      {"restartPolicy", "Never"},
      {"automountServiceAccountToken", false},
      {"terminationGracePeriodSeconds", 10},
      {"securityContext", Merged({{"runAsNonRoot", true},
                                  {"runAsUser", kWorkerUid},
                                  {"runAsGroup", kWorkerUid},
                                  {"fsGroup", kWorkerUid},
                                  {"seccompProfile", {{"type", "RuntimeDefault"}}}},
                                 worker.pod_security_context)},
  };
  const bool token = !options.worker_token_key.empty() && std::string(role) == kWorkerRole;
  AddVolumes(worker, options, token ? WorkerTokenSecretName(name) : "", pod_spec, container);
  pod_spec["containers"] = json::array({container});
  pod_spec.update(worker.pod_fields);
  json labels = worker.labels;
  labels[kJobNameLabel] = name;
  labels[kRoleLabel] = role;
  labels["app.kubernetes.io/name"] = absl::StrCat("paci-", role);
  labels["paci.dev/trainingjob"] = name;
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", pod_name},
            {"namespace", job.metadata.namespace_name},
            {"labels", labels},
            {"annotations", worker.annotations},
            {"ownerReferences", OwnerReference(job.metadata)}}},
          {"spec", pod_spec}};
}

}  // namespace

json WorkerPod(const TrainingJob& job, int index, const ReconcilerOptions& options) {
  const TrainingJobSpec& spec = job.spec;
  const std::string& name = job.metadata.name;
  const std::string pod_name = WorkerPodName(name, index);
  json container = {
      {"name", "worker"},
      {"image", WorkerImage(spec, options)},
      {"command", json::array({options.worker_command})},
      {"args", WorkerArgs(job, options)},
      {"env", WorkerEnv(spec.worker)},
      {"ports", json::array({{{"name", "link"}, {"containerPort", options.link_port}},
                             {{"name", "metrics"}, {"containerPort", options.metrics_port}}})},
  };
  json pod = TemplatePod(job, pod_name, kWorkerRole, std::move(container), options);
  pod["spec"]["hostname"] = pod_name;
  // Held at the gang gate until every worker pod of the job fits (gang.h);
  // an elastic job's start as they fit: it runs at the shape they allow.
  if (!spec.job.ok() || !spec.job->pipeline().has_elastic()) {
    pod["spec"]["schedulingGates"] = json::array({{{"name", kGangGate}}});
  }
  pod["spec"]["subdomain"] = WorkerServiceName(name);
  pod["metadata"]["labels"][kWorkerIndexLabel] = std::to_string(index);
  json& annotations = pod["metadata"]["annotations"];
  annotations["prometheus.io/scrape"] = "true";
  annotations["prometheus.io/port"] = std::to_string(options.metrics_port);
  return pod;
}

json DatasetPod(const TrainingJob& job, const ReconcilerOptions& options) {
  const TrainingJobSpec& spec = job.spec;
  const DatasetInitializerSpec dataset = spec.dataset.value_or(DatasetInitializerSpec{});
  json args = json::array({"prepare-data"});
  for (const std::string& source : dataset.source) args.push_back(source);
  args.push_back("--out=" + (spec.job.ok() ? spec.job->data().dataset() : std::string()));
  // Kept when it is there already (a rerun), and the closing line or the
  // error in the pod's status.
  args.push_back("--reuse");
  args.push_back(absl::StrCat("--message_file=", kTerminationMessagePath));
  for (const auto& [value, flag] :
       {std::pair<const std::string&, const char*>{dataset.tokenizer, "tokenizer"},
        {dataset.tokenizer_model, "tokenizer_model"},
        {dataset.tokenizer_json, "tokenizer_json"},
        {dataset.text_field, "text_field"}}) {
    if (!value.empty()) args.push_back(absl::StrCat("--", flag, "=", value));
  }
  for (const auto& [value, flag] : {std::pair<int64_t, const char*>{dataset.vocab_size, "vocab_size"},
                                    {dataset.shard_tokens, "shard_tokens"}}) {
    if (value != 0) args.push_back(absl::StrCat("--", flag, "=", value));
  }
  if (dataset.skip_bad_lines) args.push_back("--skip_bad_lines");
  json container = {
      {"name", "dataset"},
      {"image", WorkerImage(spec, options)},
      {"command", json::array({options.dataset_command})},
      {"args", args},
      {"env", WorkerEnv(spec.worker)},
      {"terminationMessagePath", kTerminationMessagePath},
      // A crash before the message is written: the end of its output instead.
      {"terminationMessagePolicy", "FallbackToLogsOnError"},
  };
  ReconcilerOptions without_secret = options;  // it talks to no coordinator
  without_secret.worker_secret.clear();
  json pod = TemplatePod(job, DatasetPodName(job.metadata.name), kDatasetRole,
                         std::move(container), without_secret);
  pod["metadata"]["annotations"][kGenerationAnnotation] = std::to_string(job.metadata.generation);
  return pod;
}

}  // namespace paci::op
