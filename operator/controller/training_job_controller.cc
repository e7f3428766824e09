#include "operator/controller/training_job_controller.h"

#include <algorithm>
#include <map>
#include <set>

#include <glog/logging.h>

#include "absl/strings/numbers.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/job_phase.h"
#include "operator/reconcile/gang.h"
#include "operator/reconcile/kueue.h"
#include "kube/object.h"
#include "operator/api/training_job.h"

namespace paci::op {

using nlohmann::json;
using kube::CollectionPath;
using kube::Field;
using kube::Label;
using kube::MetaString;
using kube::StringField;

namespace {
WorkQueue::Options QueueOptions(Clock& clock) {
  WorkQueue::Options options;
  options.clock = &clock;
  return options;
}

kube::Informer::Options Watching(std::string collection_path, std::string label_selector,
                           std::string resource, int watch_timeout_seconds,
                           std::string field_selector = "") {
  kube::Informer::Options options;
  options.collection_path = std::move(collection_path);
  options.label_selector = std::move(label_selector);
  options.resource = std::move(resource);
  options.watch_timeout_seconds = watch_timeout_seconds;
  options.field_selector = std::move(field_selector);
  return options;
}
}  // namespace

TrainingJobController::TrainingJobController(kube::KubeClient& kube, CoordinatorJobs& coordinator,
                                             OperatorMetrics& metrics, ControllerOptions options)
    : kube_(kube),
      coordinator_(coordinator),
      metrics_(metrics),
      options_(std::move(options)),
      clock_(*options_.clock),
      queue_(QueueOptions(clock_)),
      executor_(kube_, coordinator_, options_.reconciler, options_.component, clock_) {
  auto restarts = [this](const std::string& resource, const std::string& reason) {
    metrics_.WatchRestarted(resource, reason);
  };
  const std::string& ns = options_.watch_namespace;
  jobs_ = std::make_unique<kube::Informer>(
      kube_,
      Watching(CollectionPath("paci.dev", "v1alpha1", ns, "trainingjobs"), "", "trainingjobs",
               options_.watch_timeout_seconds),
      [this](const std::string&, const json& object) { Enqueue(object, false); },
      restarts);
  // The pods, Services, NetworkPolicies and Workloads a job owns, by their
  // label naming it.
  auto owned = [&](const char* group, const char* version, const char* plural) {
    return std::make_unique<kube::Informer>(
        kube_,
        Watching(CollectionPath(group, version, ns, plural), kJobNameLabel, plural,
                 options_.watch_timeout_seconds),
        [this](const std::string&, const json& object) { Enqueue(object, true); }, restarts);
  };
  pods_ = owned("", "v1", "pods");
  services_ = owned("", "v1", "services");
  if (options_.reconciler.network_policies) {
    network_policies_ = owned("networking.k8s.io", "v1", "networkpolicies");
  }
  if (options_.reconciler.kueue) workloads_ = owned("kueue.x-k8s.io", "v1beta2", "workloads");
  // The gang gate's view of the cluster. A gated job reconciles again each
  // poll interval, so these need no handler.
  nodes_ = std::make_unique<kube::Informer>(
      kube_,
      Watching(CollectionPath("", "v1", "", "nodes"), "", "nodes", options_.watch_timeout_seconds),
      nullptr, restarts);
  cluster_pods_ = std::make_unique<kube::Informer>(
      kube_,
      Watching(CollectionPath("", "v1", "", "pods"), "", "cluster-pods",
               options_.watch_timeout_seconds, "status.phase!=Succeeded,status.phase!=Failed"),
      nullptr, restarts);
}

TrainingJobController::~TrainingJobController() { Stop(); }

absl::Status TrainingJobController::Start(absl::Duration sync_timeout) {
  std::vector<kube::Informer*> informers = {jobs_.get(), pods_.get(), services_.get(), nodes_.get(),
                                      cluster_pods_.get()};
  if (network_policies_) informers.push_back(network_policies_.get());
  if (workloads_) informers.push_back(workloads_.get());
  for (kube::Informer* informer : informers) informer->Start();
  for (kube::Informer* informer : informers) {
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
  if (workloads_) workloads_->Stop();
  if (network_policies_) network_policies_->Stop();
  cluster_pods_->Stop();
  nodes_->Stop();
  services_->Stop();
  pods_->Stop();
  jobs_->Stop();
}

void TrainingJobController::Enqueue(const json& object, bool owned) {
  const std::string ns = MetaString(object, "namespace");
  const std::string name = owned ? Label(object, kJobNameLabel) : MetaString(object, "name");
  if (name.empty()) return;
  queue_.Add(ns + "/" + name);
  metrics_.SetQueueDepth(queue_.Depth());
}

void TrainingJobController::Work() {
  std::string key;
  while (queue_.Get(&key)) {
    const absl::Time start = clock_.Now();
    std::optional<absl::Duration> requeue_after;
    absl::Status status = ReconcileKey(key, &requeue_after);
    const absl::Duration took = clock_.Now() - start;
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
  }
}

absl::Status TrainingJobController::ReconcileKey(const std::string& key,
                                                 std::optional<absl::Duration>* requeue_after) {
  const std::vector<std::string> parts = absl::StrSplit(key, absl::MaxSplits('/', 1));
  if (parts.size() != 2) return absl::InvalidArgumentError("bad key " + key);
  const std::string& ns = parts[0];
  const std::string& name = parts[1];
  std::optional<json> job = LatestJob(key, ns, name);
  if (!job) {  // deleted; its pods go with it (owner references)
    metrics_.RemoveTrainingJob(ns, name);
    return absl::OkStatus();
  }
  absl::StatusOr<ObservedWorld> world = Observe(*job, ns, name);
  if (!world.ok()) return world.status();
  if (std::none_of(world->pods.begin(), world->pods.end(), HasGangGate)) {
    return ReconcileWorld(key, *job, *std::move(world), requeue_after, nullptr);
  }
  absl::MutexLock lock(&gang_mutex_);
  ObserveCluster(*world);
  std::vector<std::string> released;
  absl::Status status = ReconcileWorld(key, *job, *std::move(world), requeue_after, &released);
  for (const std::string& pod : released) released_[pod] = clock_.Now();
  return status;
}

absl::Status TrainingJobController::ReconcileWorld(const std::string& key, const json& job,
                                                   ObservedWorld world,
                                                   std::optional<absl::Duration>* requeue_after,
                                                   std::vector<std::string>* released) {
  ReconcileActions actions = ReconcileTrainingJob(world, options_.reconciler);
  if (released != nullptr) {
    // Before they are carried out: a release that fails half way still
    // counts until the cache shows each pod as it is.
    // By uid: a replacement pod of the same name is another pod, still gated.
    for (const auto& [name, gates] : actions.release_pods) {
      for (const json& pod : world.pods) {
        if (MetaString(pod, "name") == name) released->push_back(MetaString(pod, "uid"));
      }
    }
  }
  ActionExecutor::Result executed = executor_.Execute(std::move(world), std::move(actions));
  *requeue_after = executed.requeue_after;
  // Its series as this reconcile left it (per job: a reconcile costs the same
  // however many jobs there are; a key is one worker's at a time).
  const ObjectMeta written = ParseObjectMeta(executed.written);
  const TrainingJobStatus status = ParseTrainingJobStatus(executed.written);
  metrics_.SetTrainingJob({written.namespace_name, written.name,
                           status.phase.empty() ? "Pending" : status.phase,
                           status.coordinator_job});
  if (written.resource_version != ParseObjectMeta(job).resource_version) {
    absl::MutexLock lock(&written_mutex_);
    written_[key] = std::move(executed.written);
  }
  return executed.status;
}

void TrainingJobController::ObserveCluster(ObservedWorld& world) {
  world.nodes = nodes_->List();
  world.cluster_pods = cluster_pods_->List();
  std::set<std::string> caught_up;
  for (std::vector<json>* pods : {&world.cluster_pods, &world.pods}) {
    for (json& pod : *pods) {
      const std::string uid = MetaString(pod, "uid");
      if (released_.count(uid) == 0) continue;
      if (!HasGangGate(pod)) {
        caught_up.insert(uid);
      } else {
        pod["spec"]["schedulingGates"] = GatesWithoutGang(pod);
      }
    }
  }
  // Forgotten once the cache shows the pod released, or after a minute
  // without it in the cache (finished or deleted; the cluster's pod watch
  // may also not have seen it yet, hence the minute).
  for (auto it = released_.begin(); it != released_.end();) {
    const bool stale = world.now - it->second > absl::Minutes(1);
    it = caught_up.count(it->first) != 0 || stale ? released_.erase(it) : std::next(it);
  }
}

std::optional<json> TrainingJobController::LatestJob(const std::string& key, const std::string& ns,
                                                     const std::string& name) {
  std::optional<json> job = jobs_->Get(ns, name);
  absl::MutexLock lock(&written_mutex_);
  auto it = written_.find(key);
  if (it == written_.end()) return job;
  // resourceVersions are opaque to clients, but every API server in use
  // (etcd's revisions, and the test server) numbers them in order: use that
  // when they are numbers, and trust the cache otherwise.
  int64_t cached = 0, ours = 0;
  if (job && absl::SimpleAtoi(ParseObjectMeta(*job).resource_version, &cached) &&
      absl::SimpleAtoi(ParseObjectMeta(it->second).resource_version, &ours) && cached < ours) {
    return it->second;  // the cache has not seen our last write yet
  }
  written_.erase(it);
  return job;
}

absl::StatusOr<ObservedWorld> TrainingJobController::Observe(json job, const std::string& ns,
                                                             const std::string& name) {
  ObservedWorld world;
  world.now = clock_.Now();
  world.pods = pods_->List([&](const json& pod) {
    return MetaString(pod, "namespace") == ns && Label(pod, kJobNameLabel) == name;
  });
  world.service_exists = services_->Get(ns, WorkerServiceName(name)).has_value();
  world.network_policy_exists =
      network_policies_ && network_policies_->Get(ns, WorkerServiceName(name)).has_value();
  for (const json& pod : world.pods) {
    // The dataset initializer's progress: the last line prepare-data printed.
    // Best effort: without it the condition names the pod instead.
    if (Label(pod, kRoleLabel) != kDatasetRole ||
        StringField(Field(pod, "status"), "phase") != "Running") {
      continue;
    }
    absl::StatusOr<std::string> log = kube_.GetText(absl::StrCat(
        CollectionPath("", "v1", ns, "pods"), "/", MetaString(pod, "name"), "/log?tailLines=1"));
    if (log.ok()) {
      std::string line(absl::StripAsciiWhitespace(*log));
      if (const size_t cr = line.rfind('\r'); cr != std::string::npos) line = line.substr(cr + 1);
      world.dataset_progress = line;
    }
  }
  // The metadata and status only: the reconcile reads the whole job (its
  // spec's proto the most costly part) once, from world.job.
  const ObjectMeta meta = ParseObjectMeta(job);
  const TrainingJobStatus status = ParseTrainingJobStatus(job);
  if (workloads_ && !QueueName(meta).empty()) {
    // The Workload the status names, and the slice that would replace it.
    // Once Kueue has finished the old one (or it is gone, deleted by Kueue's
    // retention policy) and admitted the slice, the slice is the job's Workload.
    std::string name = CurrentWorkloadName(meta, status.workload);
    world.workload = workloads_->Get(ns, name);
    world.workload_slice = workloads_->Get(ns, NextWorkloadName(meta, name));
    if ((!world.workload || ReplacedBySlice(*world.workload)) && world.workload_slice &&
        ReadAdmission(*world.workload_slice).state == Admission::kAdmitted) {
      world.workload = std::move(world.workload_slice);
      name = NextWorkloadName(meta, name);
      world.workload_slice = workloads_->Get(ns, NextWorkloadName(meta, name));
    }
    const std::string priority_class = PriorityClassName(meta);
    if (!world.workload && !priority_class.empty()) {
      // Read when the Workload is made: its priority is the class' value.
      absl::StatusOr<json> read = kube_.Get(
          CollectionPath("kueue.x-k8s.io", "v1beta2", "", "workloadpriorityclasses") + "/" +
          priority_class);
      if (read.ok()) {
        world.priority_class = *std::move(read);
      } else if (!absl::IsNotFound(read.status())) {
        return read.status();
      }
    }
  }
  const std::string coordinator_name = status.coordinator_job;
  world.job = std::move(job);
  if (coordinator_name.empty()) return world;
  // Progress is mirrored without the loss histories; a parity run that has
  // ended is read again with them, once, to be recorded.
  absl::StatusOr<v1::Job> observed = coordinator_.Get(coordinator_name, false);
  if (observed.ok() && IsTerminal(observed->status().phase()) && ReadsLossHistory(ParseTrainingJob(world.job))) {
    observed = coordinator_.Get(coordinator_name, true);
  }
  if (observed.ok()) {
    world.coordinator_job = *std::move(observed);
  } else if (!absl::IsNotFound(observed.status())) {
    return observed.status();
  }
  return world;
}

}  // namespace paci::op
