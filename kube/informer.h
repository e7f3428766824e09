#pragma once

// Keeps a local copy of one collection (e.g. every TrainingJob, or the pods
// with a label) up to date: list, then watch from the list's
// resourceVersion. A dropped watch resumes from the last version seen, after
// a backoff; an expired version (410 Gone) is answered by listing again, and
// the difference is reported as events, so no change is ever missed.
//
// Owns one thread (Start/Stop). Get/List are thread-safe and never block on
// the network. The handler runs on the informer's thread after the cache has
// the change; it must not block for long (it enqueues work).

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "kube/kube_client.h"

namespace paci::kube {

class Informer {
 public:
  struct Options {
    std::string collection_path;  // e.g. CollectionPath("", "v1", "", "pods")
    std::string label_selector;
    std::string resource;  // names it in logs and metrics
    absl::Duration initial_backoff = absl::Milliseconds(200);
    absl::Duration max_backoff = absl::Seconds(10);
    int watch_timeout_seconds = 300;
    // "status.phase!=Succeeded": an object that leaves the selection is
    // DELETED from the cache, as the server's watch reports it.
    std::string field_selector;
  };
  // type is ADDED, MODIFIED or DELETED.
  using Handler = std::function<void(const std::string& type, const nlohmann::json& object)>;
  // Told each time a watch has to be restarted: reason "dropped" or "expired".
  using RestartObserver = std::function<void(const std::string& resource, const std::string& reason)>;

  struct Stats {
    int lists = 0;    // successful lists
    int watches = 0;  // watch requests made
    int dropped = 0;  // watches that ended with an error and resumed
    int expired = 0;  // 410 Gone, answered by a new list
  };

  Informer(KubeClient& client, Options options, Handler handler,
           RestartObserver restarts = nullptr);
  ~Informer();
  Informer(const Informer&) = delete;
  Informer& operator=(const Informer&) = delete;

  void Start();
  // Ends the watch and joins the thread. Idempotent.
  void Stop();
  // True once the first list is in the cache; false after `timeout`.
  bool WaitForSync(absl::Duration timeout);

  std::optional<nlohmann::json> Get(const std::string& ns, const std::string& name) const;
  std::vector<nlohmann::json> List(
      const std::function<bool(const nlohmann::json&)>& filter = nullptr) const;
  Stats stats() const;

 private:
  void Run();
  absl::Status ListAndReplace();
  void Apply(const WatchEvent& event);
  void Notify(const std::string& type, const nlohmann::json& object);

  KubeClient& client_;
  const Options options_;
  const Handler handler_;
  const RestartObserver restarts_;

  mutable absl::Mutex mutex_;
  std::map<std::string, nlohmann::json> objects_ ABSL_GUARDED_BY(mutex_);  // "ns/name"
  std::string resource_version_ ABSL_GUARDED_BY(mutex_);
  bool synced_ ABSL_GUARDED_BY(mutex_) = false;
  Stats stats_ ABSL_GUARDED_BY(mutex_);

  absl::Notification stop_;
  WatchCanceller canceller_;
  std::thread thread_;
};


}  // namespace paci::kube
