#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "paci/v1/coordinator.pb.h"
#include "server/job_scheduler.h"

namespace paci {

// The workers connected to the coordinator, as Ray's GCS keeps its node
// table: who each is (its registration), how to reach it (a Sender that
// enqueues on its stream), and which stage of which job's attempt it runs.
// What a lost worker means for its job is the JobManager's to decide.
//
// When each was last heard from is WorkerLiveness's, under a lock of its own.
//
// Not thread-safe: its owner holds one lock around every call.
class WorkerRegistry {
 public:
  // Enqueues a message to one worker; must not block.
  using Sender = std::function<void(const v1::CoordinatorMessage&)>;

  struct Worker {
    v1::WorkerRegistration registration;
    // The namespace of the jobs it is placed on (their kNamespaceLabel, "" for
    // none), as the gateway found it from its certificate (WorkerNamespace).
    std::string name_space;
    Sender sender;
    std::string job;  // the job it runs or is stopping, "" when idle
    int64_t attempt = 0;
    int slot = -1;  // replica * P + stage of the attempt it runs (JobManager)
    bool stopping = false;  // told to stop; idle once it reports its end
  };

  // Registers a worker that is placed on the jobs of namespace `name_space`
  // ("": the jobs of none). AlreadyExists if that id is connected.
  absl::StatusOr<Worker*> Add(const v1::WorkerRegistration& registration, Sender sender,
                              const std::string& name_space = "");
  // The worker, or nullptr when it is not connected.
  Worker* Find(const std::string& id);
  // Removes a worker; returns what it was (nullopt when unknown).
  std::optional<Worker> Remove(const std::string& id);

  // The worker runs slot `slot` (replica * P + stage) of the job's attempt
  // from now on.
  void Assign(const std::string& id, const std::string& job, int64_t attempt, int slot);
  // The worker's stage ended: it is idle again.
  static void Release(Worker& worker);
  // Tells every worker of the job that is not already stopping to stop, with
  // `reason`; returns the messages to send.
  std::vector<std::pair<Sender, v1::CoordinatorMessage>> StopJob(const std::string& job,
                                                                  const std::string& reason);
  // Whether any worker still runs or stops a stage of the job.
  bool Holds(const std::string& job) const;

  // Every worker as the scheduler sees it, in registration order.
  std::vector<WorkerSlot> Slots() const;
  // The labels the scheduler matches a worker by: those it registered with,
  // and kNamespaceLabel, its namespace (whatever it registered), which each
  // job's selector asks for as its own (AsPending).
  static std::map<std::string, std::string> SchedulingLabels(
      const v1::WorkerRegistration& registration, const std::string& name_space);
  const Worker& at(const std::string& id) const { return workers_.at(id); }

  struct Counts {
    int idle = 0;
    int busy = 0;
    int stopping = 0;
  };
  Counts Count() const;
  size_t size() const { return workers_.size(); }

  // The message that stops one worker's stage.
  static v1::CoordinatorMessage StopMessage(const std::string& job, int64_t attempt,
                                            const std::string& reason);

 private:
  std::map<std::string, Worker> workers_;
  std::vector<std::string> order_;  // registration order
};

// When each connected worker was last heard from, and which went silent:
// liveness, under a lock of its own, so that a heartbeat (Touch) never waits
// for the JobManager's lock (a change of jobs, a ListJobs, a watcher).
// Thread-safe.
class WorkerLiveness {
 public:
  // A worker connected at `now`.
  void Add(const std::string& id, absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);
  void Remove(const std::string& id) ABSL_LOCKS_EXCLUDED(mu_);
  // A heartbeat or any message: the worker is alive at `now` (nothing for a
  // worker not added).
  void Touch(const std::string& id, absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);
  // A message of the worker is being handled from `now` until End: its stream
  // is alive, and the heartbeats behind that message (a slow store write) do
  // not make it silent.
  void Begin(const std::string& id, absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);
  void End(const std::string& id, absl::Time now) ABSL_LOCKS_EXCLUDED(mu_);
  // The workers not heard from for longer than `timeout`, none of whose
  // messages is being handled.
  std::vector<std::string> Silent(absl::Time now, absl::Duration timeout) const
      ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Seen {
    absl::Time last;
    int handling = 0;  // messages between Begin and End
  };
  mutable absl::Mutex mu_;
  std::map<std::string, Seen> seen_ ABSL_GUARDED_BY(mu_);
};

}  // namespace paci
