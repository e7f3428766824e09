#include "kube/informer.h"

#include <glog/logging.h>

#include "common/backoff.h"
#include "kube/object.h"

namespace paci::kube {

using nlohmann::json;

namespace {
std::string VersionOf(const json& object) {
  return object.value("metadata", json::object()).value("resourceVersion", "");
}
}  // namespace

Informer::Informer(KubeClient& client, Options options, Handler handler, RestartObserver restarts)
    : client_(client),
      options_(std::move(options)),
      handler_(std::move(handler)),
      restarts_(std::move(restarts)) {}

Informer::~Informer() { Stop(); }

void Informer::Start() { thread_ = std::thread([this] { Run(); }); }

void Informer::Stop() {
  if (!stop_.HasBeenNotified()) stop_.Notify();
  canceller_.Cancel();
  if (thread_.joinable()) thread_.join();
}

bool Informer::WaitForSync(absl::Duration timeout) {
  absl::MutexLock lock(&mutex_);
  return mutex_.AwaitWithTimeout(absl::Condition(&synced_), timeout);
}

std::optional<json> Informer::Get(const std::string& ns, const std::string& name) const {
  absl::MutexLock lock(&mutex_);
  auto it = objects_.find(ns + "/" + name);
  if (it == objects_.end()) return std::nullopt;
  return it->second;
}

std::vector<json> Informer::List(const std::function<bool(const json&)>& filter) const {
  absl::MutexLock lock(&mutex_);
  std::vector<json> out;
  for (const auto& [key, object] : objects_) {
    if (!filter || filter(object)) out.push_back(object);
  }
  return out;
}

Informer::Stats Informer::stats() const {
  absl::MutexLock lock(&mutex_);
  return stats_;
}

void Informer::Notify(const std::string& type, const json& object) {
  if (handler_) handler_(type, object);
}

absl::Status Informer::ListAndReplace() {
  absl::StatusOr<json> list =
      client_.List(options_.collection_path, ListOptions{options_.label_selector, options_.field_selector});
  if (!list.ok()) return list.status();
  std::map<std::string, json> fresh;
  for (const json& item : list->value("items", json::array())) fresh[ObjectKey(item)] = item;

  std::vector<std::pair<std::string, json>> changes;
  {
    absl::MutexLock lock(&mutex_);
    for (const auto& [key, object] : objects_) {
      if (fresh.count(key) == 0) changes.emplace_back("DELETED", object);
    }
    for (const auto& [key, object] : fresh) {
      auto it = objects_.find(key);
      if (it == objects_.end()) {
        changes.emplace_back("ADDED", object);
      } else if (VersionOf(it->second) != VersionOf(object)) {
        changes.emplace_back("MODIFIED", object);
      }
    }
    objects_ = std::move(fresh);
    resource_version_ = list->value("metadata", json::object()).value("resourceVersion", "");
    synced_ = true;
    ++stats_.lists;
  }
  for (const auto& [type, object] : changes) Notify(type, object);
  return absl::OkStatus();
}

void Informer::Apply(const WatchEvent& event) {
  {
    absl::MutexLock lock(&mutex_);
    const std::string version = VersionOf(event.object);
    if (!version.empty()) resource_version_ = version;
    if (event.type == "BOOKMARK") return;
    const std::string key = ObjectKey(event.object);
    if (event.type == "DELETED") {
      objects_.erase(key);
    } else {
      objects_[key] = event.object;
    }
  }
  Notify(event.type, event.object);
}

void Informer::Run() {
  bool need_list = true;
  Backoff backoff(options_.initial_backoff, options_.max_backoff);
  auto wait = [&] { stop_.WaitForNotificationWithTimeout(backoff.Next()); };
  while (!stop_.HasBeenNotified()) {
    if (need_list) {
      if (absl::Status listed = ListAndReplace(); !listed.ok()) {
        LOG(WARNING) << "informer " << options_.resource << ": list failed: " << listed;
        wait();
        continue;
      }
      need_list = false;
    }
    WatchOptions watch;
    watch.label_selector = options_.label_selector;
    watch.field_selector = options_.field_selector;
    watch.timeout_seconds = options_.watch_timeout_seconds;
    {
      absl::MutexLock lock(&mutex_);
      watch.resource_version = resource_version_;
      ++stats_.watches;
    }
    bool got_event = false;
    absl::Status status = client_.Watch(
        options_.collection_path, watch,
        [&](const WatchEvent& event) {
          got_event = true;
          Apply(event);
          return !stop_.HasBeenNotified();
        },
        &canceller_);
    if (stop_.HasBeenNotified()) break;
    if (got_event) backoff.Reset();
    if (status.ok()) continue;  // the server ended the watch: resume from the last version
    if (absl::IsOutOfRange(status)) {
      LOG(INFO) << "informer " << options_.resource << ": " << status.message()
                << "; listing again";
      {
        absl::MutexLock lock(&mutex_);
        ++stats_.expired;
      }
      if (restarts_) restarts_(options_.resource, "expired");
      need_list = true;
      continue;
    }
    LOG(WARNING) << "informer " << options_.resource << ": watch ended: " << status
                 << "; resuming in " << backoff.current();
    {
      absl::MutexLock lock(&mutex_);
      ++stats_.dropped;
    }
    if (restarts_) restarts_(options_.resource, "dropped");
    wait();
  }
}

}  // namespace paci::kube
