#include "operator/controller/training_job_controller.h"

#include <map>

#include <glog/logging.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/status_macros.h"

namespace paci::op {

using nlohmann::json;

namespace {

std::string MetaString(const json& object, const char* key) {
  const json& meta = object.value("metadata", json::object());
  const json& value = meta.value(key, json());
  return value.is_string() ? value.get<std::string>() : "";
}

std::string LabelOf(const json& object, const char* label) {
  const json& labels = object.value("metadata", json::object()).value("labels", json::object());
  const json& value = labels.value(label, json());
  return value.is_string() ? value.get<std::string>() : "";
}

// Not-found on delete and already-exists on create mean the world is already
// as wanted.
absl::Status IgnoreNotFound(absl::Status status) {
  return absl::IsNotFound(status) ? absl::OkStatus() : status;
}
absl::Status IgnoreAlreadyExists(absl::Status status) {
  return absl::IsAlreadyExists(status) ? absl::OkStatus() : status;
}

}  // namespace

TrainingJobController::TrainingJobController(KubeClient& kube, CoordinatorJobs& coordinator,
                                             OperatorMetrics& metrics, ControllerOptions options)
    : kube_(kube), coordinator_(coordinator), metrics_(metrics), options_(std::move(options)) {
  auto restarts = [this](const std::string& resource, const std::string& reason) {
    metrics_.WatchRestarted(resource, reason);
  };
  const std::string& ns = options_.watch_namespace;
  jobs_ = std::make_unique<Informer>(
      kube_,
      Informer::Options{CollectionPath("paci.dev", "v1alpha1", ns, "trainingjobs"), "",
                        "trainingjobs", absl::Milliseconds(200), absl::Seconds(10),
                        options_.watch_timeout_seconds},
      [this](const std::string&, const json& object) { Enqueue(object, false); },
      restarts);
  pods_ = std::make_unique<Informer>(
      kube_,
      Informer::Options{CollectionPath("", "v1", ns, "pods"), kJobNameLabel, "pods",
                        absl::Milliseconds(200), absl::Seconds(10), options_.watch_timeout_seconds},
      [this](const std::string&, const json& object) { Enqueue(object, true); }, restarts);
  services_ = std::make_unique<Informer>(
      kube_,
      Informer::Options{CollectionPath("", "v1", ns, "services"), kJobNameLabel, "services",
                        absl::Milliseconds(200), absl::Seconds(10), options_.watch_timeout_seconds},
      [this](const std::string&, const json& object) { Enqueue(object, true); }, restarts);
}

TrainingJobController::~TrainingJobController() { Stop(); }

absl::Status TrainingJobController::Start(absl::Duration sync_timeout) {
  jobs_->Start();
  pods_->Start();
  services_->Start();
  for (Informer* informer : {jobs_.get(), pods_.get(), services_.get()}) {
    if (!informer->WaitForSync(sync_timeout)) {
      return absl::UnavailableError(
          absl::StrCat("the caches did not fill within ", absl::FormatDuration(sync_timeout),
                       "; is the API server at ", kube_.options().server, " reachable?"));
    }
  }
  synced_ = true;
  for (int i = 0; i < options_.workers; ++i) workers_.emplace_back([this] { Work(); });
  return absl::OkStatus();
}

void TrainingJobController::Stop() {
  if (stopped_.exchange(true)) return;
  queue_.ShutDown();
  for (std::thread& worker : workers_) worker.join();
  workers_.clear();
  services_->Stop();
  pods_->Stop();
  jobs_->Stop();
}

void TrainingJobController::Enqueue(const json& object, bool owned) {
  const std::string ns = MetaString(object, "namespace");
  const std::string name = owned ? LabelOf(object, kJobNameLabel) : MetaString(object, "name");
  if (name.empty()) return;
  queue_.Add(ns + "/" + name);
  metrics_.SetQueueDepth(queue_.Depth());
}

std::string TrainingJobController::JobPath(const std::string& ns, const std::string& name) const {
  return absl::StrCat(CollectionPath("paci.dev", "v1alpha1", ns, "trainingjobs"), "/", name);
}

void TrainingJobController::Work() {
  std::string key;
  while (queue_.Get(&key)) {
    const absl::Time start = absl::Now();
    std::optional<absl::Duration> requeue_after;
    absl::Status status = ReconcileKey(key, &requeue_after);
    const absl::Duration took = absl::Now() - start;
    if (status.ok()) {
      queue_.Forget(key);
      if (requeue_after) queue_.AddAfter(key, *requeue_after);
      metrics_.RecordReconcile(requeue_after ? "requeue" : "success", took);
    } else {
      LOG(WARNING) << "reconcile " << key << ": " << status;
      metrics_.RecordReconcile("error", took);
      queue_.AddRateLimited(key);
    }
    queue_.Done(key);
    metrics_.SetQueueDepth(queue_.Depth());
    UpdateJobSeries();
  }
}

void TrainingJobController::UpdateJobSeries() {
  absl::MutexLock lock(&series_mutex_);
  std::vector<OperatorMetrics::TrainingJob> jobs;
  static const json::json_pointer kPhase("/status/phase");
  static const json::json_pointer kCoordinatorJob("/status/coordinatorJob");
  jobs_->Visit([&](const json& job) {
    auto string_at = [&](const json::json_pointer& at) {
      return job.contains(at) && job.at(at).is_string() ? job.at(at).get<std::string>()
                                                        : std::string();
    };
    const std::string phase = string_at(kPhase);
    jobs.push_back({MetaString(job, "namespace"), MetaString(job, "name"),
                    phase.empty() ? "Pending" : phase, string_at(kCoordinatorJob)});
  });
  metrics_.SetTrainingJobs(jobs);
}

absl::Status TrainingJobController::ReconcileKey(const std::string& key,
                                                 std::optional<absl::Duration>* requeue_after) {
  const std::vector<std::string> parts = absl::StrSplit(key, absl::MaxSplits('/', 1));
  if (parts.size() != 2) return absl::InvalidArgumentError("bad key " + key);
  const std::string& ns = parts[0];
  const std::string& name = parts[1];
  std::optional<json> job = jobs_->Get(ns, name);
  {
    absl::MutexLock lock(&written_mutex_);
    auto it = written_.find(key);
    if (it != written_.end()) {
      // resourceVersions are opaque to clients, but every API server in use
      // (etcd's revisions, and the test server) numbers them in order: use
      // that when they are numbers, and trust the cache otherwise.
      int64_t cached = 0, ours = 0;
      if (job && absl::SimpleAtoi(MetaString(*job, "resourceVersion"), &cached) &&
          absl::SimpleAtoi(MetaString(it->second, "resourceVersion"), &ours) && cached < ours) {
        job = it->second;  // the cache has not seen our last write yet
      } else {
        written_.erase(it);
      }
    }
  }
  if (!job) return absl::OkStatus();  // deleted; its pods go with it (owner references)

  ObservedWorld world;
  world.job = *job;
  world.now = absl::Now();
  world.pods = pods_->List([&](const json& pod) {
    return MetaString(pod, "namespace") == ns && LabelOf(pod, kJobNameLabel) == name;
  });
  world.service_exists = services_->Get(ns, name + "-workers").has_value();
  const json& status = job->value("status", json::object());
  const std::string coordinator_name =
      status.value("coordinatorJob", json()).is_string() ? status["coordinatorJob"].get<std::string>() : "";
  if (!coordinator_name.empty()) {
    absl::StatusOr<v1::Job> observed = coordinator_.Get(coordinator_name);
    if (observed.ok()) {
      world.coordinator_job = *std::move(observed);
    } else if (!absl::IsNotFound(observed.status())) {
      return observed.status();
    }
  }
  ReconcileActions actions = ReconcileTrainingJob(world, options_.reconciler);
  *requeue_after = actions.requeue_after;
  json written = *job;
  absl::Status executed = Execute(*job, std::move(actions), &written);
  if (MetaString(written, "resourceVersion") != MetaString(*job, "resourceVersion")) {
    absl::MutexLock lock(&written_mutex_);
    written_[key] = std::move(written);
  }
  return executed;
}

absl::Status TrainingJobController::Execute(const json& job, ReconcileActions actions,
                                            json* written) {
  const std::string ns = MetaString(job, "namespace");
  const std::string name = MetaString(job, "name");
  const std::string path = JobPath(ns, name);
  json& current = *written;
  current = job;

  if (actions.add_finalizer) {
    json finalizers = current["metadata"].value("finalizers", json::array());
    finalizers.push_back(kFinalizer);
    ASSIGN_OR_RETURN(current, kube_.MergePatch(path, {{"metadata",
                                                        {{"finalizers", finalizers},
                                                         {"resourceVersion",
                                                          MetaString(current, "resourceVersion")}}}}));
  }
  if (actions.cancel) {
    RETURN_IF_ERROR(IgnoreNotFound(coordinator_.Cancel(*actions.cancel)));
    LOG(INFO) << "job " << ns << "/" << name << ": cancelled " << *actions.cancel;
  }
  for (const std::string& pod : actions.delete_pods) {
    RETURN_IF_ERROR(IgnoreNotFound(
        kube_.Delete(absl::StrCat(CollectionPath("", "v1", ns, "pods"), "/", pod))));
  }
  if (actions.create_service) {
    RETURN_IF_ERROR(IgnoreAlreadyExists(
        kube_.Create(CollectionPath("", "v1", ns, "services"), *actions.create_service).status()));
  }
  for (const json& pod : actions.create_pods) {
    RETURN_IF_ERROR(
        IgnoreAlreadyExists(kube_.Create(CollectionPath("", "v1", ns, "pods"), pod).status()));
  }
  absl::Status submit_error;
  if (actions.submit) {
    absl::StatusOr<v1::Job> submitted = coordinator_.Submit(*actions.submit);
    if (submitted.ok()) {
      LOG(INFO) << "job " << ns << "/" << name << ": submitted as " << actions.submit->name();
    } else if (absl::IsInvalidArgument(submitted.status()) ||
               absl::IsAlreadyExists(submitted.status())) {
      // The coordinator refuses it for good: say so in the status.
      const std::string message(submitted.status().message());
      json status = actions.status.value_or(current.value("status", json::object()));
      status["phase"] = "Failed";
      status["message"] = message;
      actions.status = status;
      actions.requeue_after.reset();
      actions.events.push_back({"Warning", "SubmitRejected", message});
    } else {
      submit_error = submitted.status();  // retried with backoff, status written first
    }
  }
  for (const KubeEvent& event : actions.events) RecordEvent(current, event);
  if (actions.status) {
    const json desired = *actions.status;
    ASSIGN_OR_RETURN(current, kube_.UpdateStatus(path, current,
                                                 [&](json& object) { object["status"] = desired; }));
  }
  RETURN_IF_ERROR(submit_error);
  if (actions.remove_finalizer) {
    json finalizers = json::array();
    for (const json& f : current["metadata"].value("finalizers", json::array())) {
      if (f != kFinalizer) finalizers.push_back(f);
    }
    RETURN_IF_ERROR(IgnoreNotFound(
        kube_
            .MergePatch(path, {{"metadata",
                                {{"finalizers", finalizers},
                                 {"resourceVersion", MetaString(current, "resourceVersion")}}}})
            .status()));
    LOG(INFO) << "job " << ns << "/" << name << ": finalized";
  }
  if (actions.delete_job) {
    LOG(INFO) << "job " << ns << "/" << name << ": deleting, ttlSecondsAfterFinished has passed";
    RETURN_IF_ERROR(IgnoreNotFound(kube_.Delete(path)));
  }
  return absl::OkStatus();
}

void TrainingJobController::RecordEvent(const json& job, const KubeEvent& event) {
  const std::string ns = MetaString(job, "namespace");
  const std::string now = absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone());
  const json object = {
      {"apiVersion", "v1"},
      {"kind", "Event"},
      {"metadata", {{"generateName", MetaString(job, "name") + "."}, {"namespace", ns}}},
      {"involvedObject",
       {{"apiVersion", "paci.dev/v1alpha1"},
        {"kind", "TrainingJob"},
        {"name", MetaString(job, "name")},
        {"namespace", ns},
        {"uid", MetaString(job, "uid")},
        {"resourceVersion", MetaString(job, "resourceVersion")}}},
      {"reason", event.reason},
      {"message", event.message},
      {"type", event.type},
      {"source", {{"component", options_.component}}},
      {"reportingComponent", options_.component},
      {"firstTimestamp", now},
      {"lastTimestamp", now},
      {"count", 1},
  };
  LOG(INFO) << "job " << ns << "/" << MetaString(job, "name") << ": " << event.type << " "
            << event.reason << ": " << event.message;
  if (absl::Status s = kube_.Create(CollectionPath("", "v1", ns, "events"), object).status();
      !s.ok()) {
    LOG(WARNING) << "event " << event.reason << ": " << s;
  }
}

}  // namespace paci::op
