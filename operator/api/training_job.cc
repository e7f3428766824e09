#include "operator/api/training_job.h"

#include <algorithm>
#include <limits>
#include <utility>

#include <google/protobuf/util/json_util.h>

#include "absl/strings/str_cat.h"
#include "common/parity.h"

namespace paci::op {

using kube::Field;
using kube::IntField;
using kube::StringField;
using nlohmann::json;

std::string WorkerServiceName(const std::string& job_name) { return job_name + "-workers"; }

std::string WorkerPodName(const std::string& job_name, int index) {
  return absl::StrCat(job_name, "-worker-", index);
}

std::string DatasetPodName(const std::string& job_name) { return job_name + "-dataset"; }

std::string WorkerTokenSecretName(const std::string& job_name) {
  return job_name + kWorkerTokenSecretSuffix;
}

json WorkerLabels(const std::string& job_name) {
  return {{kJobNameLabel, job_name}, {kRoleLabel, kWorkerRole}};
}

bool IsFinished(const std::string& phase) {
  return phase == kPhaseSucceeded || phase == kPhaseFailed || phase == kPhaseCancelled;
}

bool ObjectMeta::HasFinalizer(const std::string& finalizer) const {
  return std::find(finalizers.begin(), finalizers.end(), finalizer) != finalizers.end();
}

std::string ObjectMeta::Label(const std::string& key) const {
  auto it = labels.find(key);
  return it == labels.end() ? "" : it->second;
}

std::string ObjectMeta::Key() const { return absl::StrCat(namespace_name, "/", name); }

const kube::Condition* TrainingJobStatus::FindCondition(const std::string& type) const {
  for (const kube::Condition& c : conditions) {
    if (c.type == type) return &c;
  }
  return nullptr;
}

namespace {

// At most as many parity seeds as the CRD allows, and steps as spec.training.steps.
constexpr size_t kMaxParitySeeds = 10;
constexpr int64_t kMaxParitySteps = 1'000'000'000;

std::map<std::string, std::string> StringMap(const json& object) {
  std::map<std::string, std::string> map;
  if (!object.is_object()) return map;
  for (auto it = object.begin(); it != object.end(); ++it) {
    if (it->is_string()) map[it.key()] = it->get<std::string>();
  }
  return map;
}

bool IsTrue(const json& object, const char* key) { return Field(object, key) == json(true); }

}  // namespace

ObjectMeta ParseObjectMeta(const json& object) {
  const json& meta = Field(object, "metadata");
  ObjectMeta m;
  m.name = StringField(meta, "name");
  m.namespace_name = StringField(meta, "namespace");
  m.uid = StringField(meta, "uid");
  m.resource_version = StringField(meta, "resourceVersion");
  m.creation_timestamp = StringField(meta, "creationTimestamp");
  m.generation = IntField(meta, "generation", 1);
  m.being_deleted = Field(meta, "deletionTimestamp").is_string();
  if (const json& finalizers = Field(meta, "finalizers"); finalizers.is_array()) {
    for (const json& f : finalizers) {
      if (f.is_string()) m.finalizers.push_back(f.get<std::string>());
    }
  }
  m.labels = StringMap(Field(meta, "labels"));
  return m;
}

namespace {

// spec.model ... spec.runtime through the proto3 JSON mapping.
absl::StatusOr<v1::JobSpec> ParseJobSections(const json& spec) {
  json message = json::object();
  for (const char* key :
       {"model", "pipeline", "optimizer", "training", "data", "checkpoint", "runtime"}) {
    if (spec.is_object() && spec.contains(key)) message[key] = spec[key];
  }
  v1::JobSpec result;
  google::protobuf::util::JsonParseOptions parse_options;
  parse_options.ignore_unknown_fields = false;
  const auto parsed =
      google::protobuf::util::JsonStringToMessage(message.dump(), &result, parse_options);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("spec: ", parsed.message().as_string()));
  }
  return result;
}

RunPolicySpec ParseRunPolicy(const json& policy) {
  RunPolicySpec p;
  p.suspend = IsTrue(policy, "suspend");
  if (const json& limit = Field(policy, "backoffLimit"); limit.is_number_integer()) {
    p.backoff_limit = limit.get<int32_t>();
  }
  p.active_deadline_seconds = IntField(policy, "activeDeadlineSeconds", 0);
  p.priority = static_cast<int32_t>(IntField(policy, "priority", 0));
  p.ttl_seconds_after_finished = kube::OptionalIntField(policy, "ttlSecondsAfterFinished");
  return p;
}

WorkerTemplate ParseWorker(const json& worker) {
  WorkerTemplate w;
  if (worker.is_object()) w.object = worker;
  w.image = StringField(worker, "image");
  w.labels = StringMap(Field(worker, "labels"));
  w.annotations = StringMap(Field(worker, "annotations"));
  if (worker.is_object() && worker.contains("shmSize")) w.shm_size = worker["shmSize"];
  for (auto [key, into] : {std::pair<const char*, json*>{"env", &w.env},
                           {"volumes", &w.volumes},
                           {"volumeMounts", &w.volume_mounts}}) {
    if (const json& list = Field(worker, key); list.is_array()) *into = list;
  }
  if (worker.is_object()) {
    if (worker.contains("securityContext")) w.security_context = worker["securityContext"];
    if (worker.contains("podSecurityContext")) {
      w.pod_security_context = worker["podSecurityContext"];
    }
    for (const char* key : {"imagePullPolicy", "resources", "envFrom"}) {
      if (worker.contains(key)) w.container_fields[key] = worker[key];
    }
    for (const char* key : {"nodeSelector", "tolerations", "serviceAccountName", "affinity",
                            "priorityClassName", "schedulerName", "imagePullSecrets",
                            "runtimeClassName"}) {
      if (worker.contains(key)) w.pod_fields[key] = worker[key];
    }
  }
  return w;
}

// spec.initializer.dataset: it needs spec.data.dataset (the folder it
// writes) and a source.
absl::Status ParseDataset(const json& spec, DatasetInitializerSpec& d) {
  const json& dataset = Field(Field(spec, "initializer"), "dataset");
  if (StringField(Field(spec, "data"), "dataset").empty()) {
    return absl::InvalidArgumentError(
        "spec.initializer.dataset: it writes spec.data.dataset: name that folder (on a volume of "
        "spec.worker) instead of spec.data.corpusPath");
  }
  const json& source = Field(dataset, "source");
  if (!source.is_array() || source.empty()) {
    return absl::InvalidArgumentError(
        "spec.initializer.dataset.source: give the text or JSONL files, folders or globs to "
        "prepare");
  }
  for (size_t i = 0; i < source.size(); ++i) {
    if (!source[i].is_string() || source[i].get<std::string>().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("spec.initializer.dataset.source[", i,
                                                     "]: must be a non-empty path"));
    }
    d.source.push_back(source[i].get<std::string>());
  }
  d.tokenizer = StringField(dataset, "tokenizer");
  d.tokenizer_model = StringField(dataset, "tokenizerModel");
  d.tokenizer_json = StringField(dataset, "tokenizerJson");
  d.text_field = StringField(dataset, "textField");
  d.vocab_size = IntField(dataset, "vocabSize", 0);
  d.shard_tokens = IntField(dataset, "shardTokens", 0);
  d.skip_bad_lines = IsTrue(dataset, "skipBadLines");
  return absl::OkStatus();
}

absl::Status ParseParity(const json& parity, ParitySpec& p) {
  p.seeds = DefaultParitySeeds();
  if (parity.contains("seeds")) {
    const json& given = parity["seeds"];
    if (!given.is_array() || given.empty() || given.size() > kMaxParitySeeds) {
      return absl::InvalidArgumentError(absl::StrCat(
          "spec.parity.seeds: give 1 to ", kMaxParitySeeds, " seeds, got ", given.dump()));
    }
    p.seeds.clear();
    for (const json& seed : given) {
      if (!seed.is_number_integer() || seed.get<int64_t>() < 0 ||
          seed.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "spec.parity.seeds: ", seed.dump(), " is not a seed (an integer from 0 to 2^31 - 1)"));
      }
      p.seeds.push_back(seed.get<int>());
    }
  }
  if (parity.contains("steps")) {
    const json& steps = parity["steps"];
    if (!steps.is_number_integer() || steps.get<int64_t>() < 0 ||
        steps.get<int64_t>() > kMaxParitySteps) {
      return absl::InvalidArgumentError(absl::StrCat(
          "spec.parity.steps: ", steps.dump(), " is not a number of steps (1 to ", kMaxParitySteps,
          ", or 0 for spec.training.steps)"));
    }
    p.steps = steps.get<int64_t>();
  }
  return absl::OkStatus();
}

TrainingJobSpec ParseSpec(const json& spec) {
  TrainingJobSpec s;
  s.job = ParseJobSections(spec);
  s.run_policy = ParseRunPolicy(Field(spec, "runPolicy"));
  s.worker = ParseWorker(Field(spec, "worker"));
  if (Field(spec, "initializer").contains("dataset")) {
    s.dataset.emplace();
    s.initializer_error = ParseDataset(spec, *s.dataset);
  }
  if (const json& parity = Field(spec, "parity"); spec.is_object() && spec.contains("parity") &&
                                                  spec["parity"].is_object()) {
    s.parity.emplace();
    s.parity_error = ParseParity(parity, *s.parity);
  }
  return s;
}

}  // namespace

TrainingJob ParseTrainingJob(const json& object) {
  TrainingJob job;
  job.metadata = ParseObjectMeta(object);
  job.spec = ParseSpec(Field(object, "spec"));
  job.status = ParseTrainingJobStatus(object);
  return job;
}

}  // namespace paci::op
