#include "operator/reconcile/job_objects.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "operator/reconcile/reconcile_test_util.h"
#include "operator/reconcile/training_job_reconciler.h"

namespace paci::op {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

json Job(json worker) {
  json job = json::parse(R"({
    "apiVersion": "paci.dev/v1alpha1", "kind": "TrainingJob",
    "metadata": {"name": "kjv", "namespace": "team-a", "uid": "0123456789abcdef", "generation": 1},
    "spec": {
      "model": {"vocabSize": 80, "numLayers": 4, "dModel": 32, "numHeads": 4, "seqLen": 32},
      "pipeline": {"numStages": 2, "schedule": "paci", "accumulation": 2, "microBatchSize": 4},
      "optimizer": {"lr": 0.003},
      "training": {"steps": 60},
      "data": {"corpusPath": "/data/corpus.txt"}
    }})");
  job["spec"]["worker"] = std::move(worker);
  return job;
}

const json* Find(const json& list, const std::string& name) {
  for (const json& item : list) {
    if (item["name"] == name) return &item;
  }
  return nullptr;
}

TEST(WorkerNetworkPolicyTest, TheJobsPodsTakeEachOtherAndMetricsScrapesOnly) {
  ReconcilerOptions options;
  options.metrics_port = 9100;
  const json job = Job(json::object());
  const json policy = WorkerNetworkPolicy(ParseTrainingJob(job), options);
  EXPECT_EQ(policy["apiVersion"], "networking.k8s.io/v1");
  EXPECT_EQ(policy["metadata"]["name"], "kjv-workers");
  EXPECT_EQ(policy["metadata"]["namespace"], "team-a");
  EXPECT_EQ(policy["metadata"]["labels"][kJobNameLabel], "kjv");  // the owned informer's label
  EXPECT_EQ(policy["metadata"]["ownerReferences"][0]["uid"], "0123456789abcdef");
  const json& spec = policy["spec"];
  // It selects exactly the job's pods, as their labels are.
  const json pod_labels = WorkerPod(ParseTrainingJob(job), 1, options)["metadata"]["labels"];
  for (const auto& [key, value] : spec["podSelector"]["matchLabels"].items()) {
    EXPECT_EQ(pod_labels[key], value) << key;
  }
  EXPECT_EQ(spec["policyTypes"], json::array({"Ingress"}));
  ASSERT_EQ(spec["ingress"].size(), 2u);
  // Peers: the same selector, no namespaceSelector (so this namespace only), every port.
  EXPECT_EQ(spec["ingress"][0], json({{"from", json::array({{{"podSelector", spec["podSelector"]}}})}}));
  // Anyone: the metrics port only.
  EXPECT_EQ(spec["ingress"][1],
            json::parse(R"({"ports": [{"protocol": "TCP", "port": 9100}]})"));
}

TEST(WorkerPodTest, DefaultsMeetTheRestrictedPodSecurityLevel) {
  const json pod = WorkerPod(ParseTrainingJob(Job(json::object())), 0, ReconcilerOptions{});
  const json& pod_security = pod["spec"]["securityContext"];
  EXPECT_EQ(pod_security["runAsNonRoot"], true);
  EXPECT_EQ(pod_security["runAsUser"], kWorkerUid);
  EXPECT_EQ(pod_security["fsGroup"], kWorkerUid);
  EXPECT_EQ(pod_security["seccompProfile"]["type"], "RuntimeDefault");
  const json& container = pod["spec"]["containers"][0];
  EXPECT_EQ(container["securityContext"]["allowPrivilegeEscalation"], false);
  EXPECT_EQ(container["securityContext"]["capabilities"]["drop"], json::array({"ALL"}));
  EXPECT_EQ(container["securityContext"]["readOnlyRootFilesystem"], true);
  // The root file system is read-only, so /tmp is an emptyDir.
  const json* tmp = Find(pod["spec"]["volumes"], "paci-tmp");
  ASSERT_NE(tmp, nullptr);
  EXPECT_TRUE((*tmp)["emptyDir"].is_object());
  EXPECT_EQ((*Find(container["volumeMounts"], "paci-tmp"))["mountPath"], "/tmp");
}

TEST(WorkerPodTest, CarriesThePodTemplateFieldsOfTheSpec) {
  const json worker = json::parse(R"({
    "volumes": [{"name": "shared", "persistentVolumeClaim": {"claimName": "paci-shared"}}],
    "volumeMounts": [{"name": "shared", "mountPath": "/shared", "subPath": "kjv"}],
    "labels": {"team": "nlp"}, "annotations": {"owner": "ada"},
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}}},
    "priorityClassName": "training", "schedulerName": "volcano",
    "imagePullSecrets": [{"name": "registry"}],
    "envFrom": [{"configMapRef": {"name": "tuning"}, "prefix": "T_"}],
    "env": [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}],
    "podSecurityContext": {"runAsUser": 1000},
    "securityContext": {"readOnlyRootFilesystem": false}
  })");
  const json pod = WorkerPod(ParseTrainingJob(Job(worker)), 1, ReconcilerOptions{});
  const json& spec = pod["spec"];
  const json& container = spec["containers"][0];
  EXPECT_EQ((*Find(spec["volumes"], "shared"))["persistentVolumeClaim"]["claimName"],
            "paci-shared");
  EXPECT_EQ((*Find(container["volumeMounts"], "shared"))["subPath"], "kjv");
  EXPECT_EQ(pod["metadata"]["labels"]["team"], "nlp");
  EXPECT_EQ(pod["metadata"]["labels"][kWorkerIndexLabel], "1");
  EXPECT_EQ(pod["metadata"]["annotations"]["owner"], "ada");
  EXPECT_EQ(pod["metadata"]["annotations"]["prometheus.io/scrape"], "true");
  EXPECT_TRUE(spec["affinity"]["nodeAffinity"].is_object());
  EXPECT_EQ(spec["priorityClassName"], "training");
  EXPECT_EQ(spec["schedulerName"], "volcano");
  EXPECT_EQ(spec["imagePullSecrets"][0]["name"], "registry");
  EXPECT_EQ(container["envFrom"][0]["prefix"], "T_");
  EXPECT_EQ((*Find(container["env"], "HF_TOKEN"))["valueFrom"]["secretKeyRef"]["key"], "token");
  EXPECT_NE(Find(container["env"], "POD_IP"), nullptr);
  // Overrides replace one setting each; the other defaults stay.
  EXPECT_EQ(spec["securityContext"]["runAsUser"], 1000);
  EXPECT_EQ(spec["securityContext"]["fsGroup"], kWorkerUid);
  EXPECT_EQ(spec["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
  EXPECT_EQ(container["securityContext"]["readOnlyRootFilesystem"], false);
  EXPECT_EQ(container["securityContext"]["allowPrivilegeEscalation"], false);
}

TEST(WorkerPodTest, AGpuWorkerGetsItsRuntimeClassGpusAndAMemoryShm) {
  const json worker = json::parse(R"({
    "image": "localhost/paci-worker-cuda:latest", "runtimeClassName": "nvidia",
    "shmSize": "2Gi", "resources": {"limits": {"nvidia.com/gpu": 1}}})");
  const json pod = WorkerPod(ParseTrainingJob(Job(worker)), 0, ReconcilerOptions{});
  const json& container = pod["spec"]["containers"][0];
  EXPECT_EQ(pod["spec"]["runtimeClassName"], "nvidia");
  EXPECT_EQ(container["resources"]["limits"]["nvidia.com/gpu"], 1);
  const json* shm = Find(pod["spec"]["volumes"], "paci-shm");
  ASSERT_NE(shm, nullptr);
  EXPECT_EQ((*shm)["emptyDir"]["medium"], "Memory");
  EXPECT_EQ((*shm)["emptyDir"]["sizeLimit"], "2Gi");
  EXPECT_EQ((*Find(container["volumeMounts"], "paci-shm"))["mountPath"], "/dev/shm");
  // Without shmSize: no such volume, and no runtime class.
  const json plain = WorkerPod(ParseTrainingJob(Job(json::object())), 0, ReconcilerOptions{});
  EXPECT_EQ(Find(plain["spec"]["volumes"], "paci-shm"), nullptr);
  EXPECT_FALSE(plain["spec"].contains("runtimeClassName"));
}

TEST(WorkerPodTest, AJobWithAStageOnAGpuGetsTheCudaWorkerImageUnlessItNamesOne) {
  ReconcilerOptions options;
  options.default_worker_image = "registry.example/paci-worker:1.0";
  options.default_worker_cuda_image = "registry.example/paci-worker-cuda:1.0";
  auto image = [&](const json& runtime, const json& worker) {
    json job = Job(worker);
    if (!runtime.is_null()) job["spec"]["runtime"] = runtime;
    return WorkerPod(ParseTrainingJob(job), 0, options)["spec"]["containers"][0]["image"].get<std::string>();
  };
  EXPECT_EQ(image(nullptr, json::object()), options.default_worker_image);
  EXPECT_EQ(image({{"device", "cpu"}}, json::object()), options.default_worker_image);
  EXPECT_EQ(image({{"device", "cuda"}}, json::object()), options.default_worker_cuda_image);
  EXPECT_EQ(image({{"device", "cuda:1"}}, json::object()), options.default_worker_cuda_image);
  // One GPU stage among CPU ones is enough.
  EXPECT_EQ(image({{"stageDevices", {"cpu", "cuda:0"}}}, json::object()),
            options.default_worker_cuda_image);
  EXPECT_EQ(image({{"stageDevices", {"cpu", "cpu"}}}, json::object()), options.default_worker_image);
  // The TrainingJob's own image wins either way.
  EXPECT_EQ(image({{"device", "cuda"}}, {{"image", "mine:2"}}), "mine:2");
}

TEST(WorkerPodTest, AUserMountAtTmpReplacesTheOperatorsOwn) {
  const json worker = json::parse(R"({
    "volumes": [{"name": "scratch", "emptyDir": {"medium": "Memory"}}],
    "volumeMounts": [{"name": "scratch", "mountPath": "/tmp"}]})");
  const json pod = WorkerPod(ParseTrainingJob(Job(worker)), 0, ReconcilerOptions{});
  EXPECT_EQ(Find(pod["spec"]["volumes"], "paci-tmp"), nullptr);
  EXPECT_EQ(pod["spec"]["containers"][0]["volumeMounts"].size(), 1u);
}

TEST(WorkerPodTest, TheWorkerSecretIsMountedAndEachKeyPassedAsAFlag) {
  ReconcilerOptions options;
  options.worker_secret = "paci-worker-credentials";
  options.worker_secret_flags = {{"ca.crt", "coordinator_tls_ca"},
                                 {"token", "coordinator_auth_token_file"}};
  const json pod = WorkerPod(ParseTrainingJob(Job(json::object())), 0, options);
  const json* volume = Find(pod["spec"]["volumes"], "paci-coordinator");
  ASSERT_NE(volume, nullptr);
  EXPECT_EQ((*volume)["secret"]["secretName"], "paci-worker-credentials");
  const json& container = pod["spec"]["containers"][0];
  const json* mount = Find(container["volumeMounts"], "paci-coordinator");
  ASSERT_NE(mount, nullptr);
  EXPECT_EQ((*mount)["mountPath"], kWorkerSecretPath);
  EXPECT_EQ((*mount)["readOnly"], true);
  const std::string args = container["args"].dump();
  EXPECT_THAT(args, HasSubstr(std::string("--coordinator_tls_ca=") + kWorkerSecretPath + "/ca.crt"));
  EXPECT_THAT(args, HasSubstr(std::string("--coordinator_auth_token_file=") + kWorkerSecretPath +
                                   "/token"));
}

struct BadTemplate {
  const char* worker;
  const char* message;
};

class ValidateWorkerTemplateTest : public ::testing::TestWithParam<BadTemplate> {};

TEST_P(ValidateWorkerTemplateTest, NamesTheField) {
  const absl::Status status = ValidateWorkerTemplate(json::parse(GetParam().worker));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()), HasSubstr(GetParam().message));
}

INSTANTIATE_TEST_SUITE_P(
    Refused, ValidateWorkerTemplateTest,
    ::testing::Values(
        BadTemplate{R"({"volumes": [{"name": "data", "emptyDir": {}}],
                        "volumeMounts": [{"name": "data", "mountPath": "/data"},
                                         {"name": "ckpt", "mountPath": "/ckpt"}]})",
                    "spec.worker.volumeMounts[1].name: no volume named \"ckpt\" in "
                    "spec.worker.volumes"},
        BadTemplate{R"({"volumes": [{"name": "data"}, {"name": "data"}]})",
                    "spec.worker.volumes[1].name: duplicate volume name \"data\""},
        BadTemplate{R"({"volumes": [{"name": "Data"}]})",
                    "spec.worker.volumes[0].name: \"Data\" is not a DNS-1123 label"},
        BadTemplate{R"({"volumes": [{"name": "paci-tmp"}]})",
                    "spec.worker.volumes[0].name: \"paci-tmp\": names starting with \"paci-\""},
        BadTemplate{R"({"volumes": [{"name": "data"}],
                        "volumeMounts": [{"name": "data", "mountPath": "data"}]})",
                    "spec.worker.volumeMounts[0].mountPath: \"data\" is not an absolute path"},
        BadTemplate{R"({"volumes": [{"name": "a"}, {"name": "b"}],
                        "volumeMounts": [{"name": "a", "mountPath": "/x"},
                                         {"name": "b", "mountPath": "/x"}]})",
                    "spec.worker.volumeMounts[1].mountPath: \"/x\" is mounted twice"},
        // A Secret of the namespace, by any of the ways a pod names one, only if the
        // operator allows it (none here): not another job's token, not the release's CA.
        BadTemplate{R"({"volumes": [{"name": "stolen", "secret": {"secretName": "other-worker-token"}}]})",
                    "spec.worker.volumes[0].secret.secretName: Secret \"other-worker-token\" is not "
                    "one a worker may use: the operator allows none"},
        BadTemplate{R"({"volumes": [{"name": "stolen", "projected": {"sources": [
                          {"secret": {"name": "other-worker-token"}}]}}]})",
                    "spec.worker.volumes[0].projected.sources[0].secret.name: Secret "
                    "\"other-worker-token\" is not one a worker may use"},
        BadTemplate{R"({"env": [{"name": "CA_KEY", "valueFrom": {"secretKeyRef":
                          {"name": "paci-ca", "key": "tls.key"}}}]})",
                    "spec.worker.env[0].valueFrom.secretKeyRef.name: Secret \"paci-ca\" is not one "
                    "a worker may use"},
        BadTemplate{R"({"envFrom": [{"configMapRef": {"name": "c"}},
                                    {"secretRef": {"name": "paci-operator-worker-token-key"}}]})",
                    "spec.worker.envFrom[1].secretRef.name: Secret "
                    "\"paci-operator-worker-token-key\" is not one a worker may use"},
        BadTemplate{R"({"volumes": [{"name": "c", "csi": {"driver": "d",
                          "nodePublishSecretRef": {"name": "paci-operator-client-tls"}}}]})",
                    "spec.worker.volumes[0].csi.nodePublishSecretRef.name: Secret "
                    "\"paci-operator-client-tls\" is not one a worker may use"},
        BadTemplate{R"({"labels": {"paci.dev/job-name": "other"}})",
                    "spec.worker.labels[paci.dev/job-name]: set by the operator"},
        BadTemplate{R"({"env": [{"name": "POD_IP", "value": "1.2.3.4"}]})",
                    "spec.worker.env[0].name: POD_IP is set by the operator"},
        BadTemplate{R"({"env": [{"name": "A", "value": "1",
                                 "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]})",
                    "spec.worker.env[0]: give value or valueFrom, not both"},
        // Pod Security's restricted profile: no way to root on a node through a TrainingJob.
        BadTemplate{R"({"volumes": [{"name": "host", "hostPath": {"path": "/"}}]})",
                    "spec.worker.volumes[0]: hostPath volumes are not allowed: a worker's are "
                    "configMap, csi, downwardAPI, emptyDir, ephemeral, persistentVolumeClaim, "
                    "projected, secret"},
        BadTemplate{R"({"volumes": [{"name": "t", "projected": {"sources": [
                          {"configMap": {"name": "c"}},
                          {"serviceAccountToken": {"path": "token"}}]}}]})",
                    "spec.worker.volumes[0].projected.sources[1]: a serviceAccountToken is not "
                    "allowed"},
        BadTemplate{R"({"securityContext": {"privileged": true}})",
                    "spec.worker.securityContext.privileged: must not be true"},
        BadTemplate{R"({"securityContext": {"allowPrivilegeEscalation": true}})",
                    "spec.worker.securityContext.allowPrivilegeEscalation: must not be true"},
        BadTemplate{R"({"securityContext": {"capabilities": {"add": ["SYS_ADMIN"]}}})",
                    "spec.worker.securityContext.capabilities.drop: must include \"ALL\""},
        BadTemplate{R"({"securityContext": {"capabilities": {"drop": ["ALL"],
                                                             "add": ["SYS_ADMIN"]}}})",
                    "spec.worker.securityContext.capabilities.add[0]: \"SYS_ADMIN\": only "
                    "NET_BIND_SERVICE"},
        BadTemplate{R"({"securityContext": {"runAsUser": 0}})",
                    "spec.worker.securityContext.runAsUser: must not be 0"},
        BadTemplate{R"({"podSecurityContext": {"runAsNonRoot": false}})",
                    "spec.worker.podSecurityContext.runAsNonRoot: must not be false"},
        BadTemplate{R"({"podSecurityContext": {"seccompProfile": {"type": "Unconfined"}}})",
                    "spec.worker.podSecurityContext.seccompProfile.type: \"Unconfined\""},
        BadTemplate{R"({"securityContext": {"procMount": "Unmasked"}})",
                    "spec.worker.securityContext.procMount: \"Unmasked\": only Default"},
        BadTemplate{R"({"podSecurityContext": {"seLinuxOptions": {"type": "spc_t"}}})",
                    "spec.worker.podSecurityContext.seLinuxOptions.type: \"spc_t\""},
        BadTemplate{R"({"podSecurityContext": {"sysctls": [{"name": "kernel.msgmax",
                                                            "value": "1"}]}})",
                    "spec.worker.podSecurityContext.sysctls[0].name: \"kernel.msgmax\" is not "
                    "a namespaced safe sysctl"}));

TEST(ValidateWorkerTemplateTest, AcceptsAWellFormedTemplate) {
  EXPECT_TRUE(ValidateWorkerTemplate(json::parse(R"({
    "volumes": [{"name": "shared", "persistentVolumeClaim": {"claimName": "c"}}],
    "volumeMounts": [{"name": "shared", "mountPath": "/shared"}],
    "labels": {"team": "nlp"},
    "env": [{"name": "A", "value": "1"}]})"))
                  .ok());
  // What the restricted profile allows stays allowed.
  const absl::Status restricted = ValidateWorkerTemplate(json::parse(R"({
    "volumes": [{"name": "cfg", "configMap": {"name": "c"}},
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {}}},
                {"name": "p", "projected": {"sources": [{"secret": {"name": "s"}}]}}],
    "securityContext": {"runAsUser": 2000, "allowPrivilegeEscalation": false,
                        "capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]},
                        "seccompProfile": {"type": "Localhost", "localhostProfile": "p.json"}},
    "podSecurityContext": {"runAsNonRoot": true, "fsGroup": 2000,
                           "sysctls": [{"name": "net.ipv4.tcp_keepalive_time", "value": "60"}]}})"),
      /*allowed_secrets=*/{"s"});
  EXPECT_TRUE(restricted.ok()) << restricted;
}

TEST(ValidateWorkerTemplateTest, NamesOnlyTheSecretsTheOperatorAllows) {
  const json worker = json::parse(R"({
    "volumes": [{"name": "creds", "secret": {"secretName": "hf"}}],
    "env": [{"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}],
    "envFrom": [{"secretRef": {"name": "wandb"}}]})");
  const absl::Status allowed = ValidateWorkerTemplate(worker, {"hf", "wandb"});
  EXPECT_TRUE(allowed.ok()) << allowed;
  const absl::Status partly = ValidateWorkerTemplate(worker, {"hf"});
  EXPECT_EQ(partly.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(partly.message()),
              HasSubstr("spec.worker.envFrom[0].secretRef.name: Secret \"wandb\" is not one a "
                        "worker may use: the operator allows hf (its --worker_allowed_secrets"));
}

// Reconciles `job` once and expects it Failed, its message holding `message`,
// with nothing made for it: no pod, no token Secret, no submit.
void ExpectFailedBeforeAnythingIsMade(const json& job, const ReconcilerOptions& options,
                                      const std::string& message) {
  const ReconcileActions actions = ReconcileTrainingJob(test::World(job), options);
  ASSERT_TRUE(actions.status.has_value());
  EXPECT_EQ((*actions.status)["phase"], "Failed");
  EXPECT_THAT((*actions.status)["message"].get<std::string>(), HasSubstr(message));
  EXPECT_TRUE(actions.create_pods.empty());
  EXPECT_FALSE(actions.create_token_secret.has_value());
  EXPECT_FALSE(actions.submit.has_value());
}

// Options with a worker-token key, so that a job that ran would get a token Secret.
ReconcilerOptions WithTokens() {
  ReconcilerOptions options;
  options.worker_token_key = std::string(32, 'k');
  return options;
}

TEST(ReconcileWithWorkerTemplateTest, ABadTemplateFailsTheJobNamingTheField) {
  ExpectFailedBeforeAnythingIsMade(
      Job(json::parse(R"({"volumeMounts": [{"name": "nowhere", "mountPath": "/x"}]})")),
      ReconcilerOptions{}, "spec.worker.volumeMounts[0].name: no volume named \"nowhere\"");
}

TEST(ReconcileWithWorkerTemplateTest, ATemplateNamingTheReleasesCaFailsBeforeAnythingIsMade) {
  ReconcilerOptions options = WithTokens();
  options.worker_allowed_secrets = {"hf"};
  ExpectFailedBeforeAnythingIsMade(
      Job(json::parse(R"({"volumes": [{"name": "ca", "secret": {"secretName": "paci-ca"}}],
                          "volumeMounts": [{"name": "ca", "mountPath": "/ca"}]})")),
      options,
      "spec.worker.volumes[0].secret.secretName: Secret \"paci-ca\" is not one a worker may "
      "use: the operator allows hf");
}

TEST(ReconcileWithWorkerTemplateTest, AJobInAReservedNamespaceFailsBeforeAnythingIsMade) {
  ReconcilerOptions options = WithTokens();
  options.reserved_namespaces = {"paci-system"};
  json job = Job(json::object());
  job["metadata"]["namespace"] = "paci-system";
  ExpectFailedBeforeAnythingIsMade(job, options,
                                   "metadata.namespace: \"paci-system\" is reserved for paci itself");
  // The same job in a namespace of its own runs.
  job["metadata"]["namespace"] = "team-a";
  EXPECT_TRUE(ReconcileTrainingJob(test::World(job), options).submit.has_value());
}

TEST(ReconcileWithWorkerTemplateTest, APriorityAboveTheOperatorsBoundFailsBeforeAnythingIsMade) {
  ReconcilerOptions options = WithTokens();
  options.max_priority = 0;
  json job = Job(json::object());
  job["spec"]["runPolicy"] = {{"priority", 1000}};
  ExpectFailedBeforeAnythingIsMade(job, options,
                                   "spec.runPolicy.priority: 1000 is above 0, the highest a "
                                   "TrainingJob may ask for (the operator's --max_priority");
  job["spec"]["runPolicy"]["priority"] = 0;
  EXPECT_TRUE(ReconcileTrainingJob(test::World(job), options).submit.has_value());
}

}  // namespace
}  // namespace paci::op
