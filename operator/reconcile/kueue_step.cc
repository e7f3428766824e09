#include "operator/reconcile/kueue_step.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "operator/reconcile/job_objects.h"
#include "operator/reconcile/kueue.h"
#include "kube/object.h"
#include "operator/api/training_job.h"

namespace paci::op {

using nlohmann::json;
using kube::BeingDeleted;
using kube::Label;
using kube::MetaString;

namespace {

bool Queued(const Reconciliation& r) {
  return r.options.kueue && !QueueName(r.job.metadata).empty();
}

// Whether a worker pod of the job is still there (leaving or not).
bool WorkerPodsLeft(const Reconciliation& r) {
  for (const json& pod : r.world.pods) {
    if (Label(pod, kRoleLabel) != kDatasetRole) return true;
  }
  return false;
}

// The job's Workload: the one observed (a slice once one replaced the
// first), else the one its status names or WorkloadName.
std::string JobWorkloadName(const Reconciliation& r) {
  return r.world.workload ? kube::MetaString(*r.world.workload, "name")
                          : CurrentWorkloadName(r.job.metadata, r.status.workload);
}

// A slice asked for and not admitted goes with the job's run: Kueue must not
// admit it for a job that no longer runs.
void DropWorkloadSlice(Reconciliation& r) {
  if (r.world.workload_slice && !BeingDeleted(*r.world.workload_slice)) {
    r.actions.delete_workload_slice = true;
  }
}

// Nothing of the job runs while Kueue has not admitted it: Suspended, with
// the Admitted and Suspended conditions saying why, and an Event when that
// changes (a Normal one unless `event_type` says otherwise).
void Hold(Reconciliation& r, const std::string& reason, const std::string& message,
          const char* event_type = "Normal") {
  if (r.CoordinatorActive()) r.actions.cancel = r.coordinator_name;
  r.DeleteAllPods(/*keep_dataset=*/true);
  DropWorkloadSlice(r);
  r.desired.phase = kPhaseSuspended;
  r.desired.coordinator_job.clear();
  r.desired.workload = JobWorkloadName(r);
  const std::string before = r.ObservedReason("Admitted", "False");
  r.SetCondition("Admitted", false, reason, message);
  r.SetCondition("Suspended", true, reason, message);
  if (before != reason) r.Event(event_type, reason, message);
}

// Kueue evicted the admitted Workload: the job stops (its checkpoints stay,
// and it resumes from the newest when admitted again under a new
// coordinator job, status.evictions in its name), and once its workers are
// gone the quota goes back to the ClusterQueue.
// A slice (the job grew before) is deleted instead: it asks for all of the
// largest shape and names a Workload that has ended, so the job queues again
// with a Workload of its own that Kueue may admit in part.
void Evict(Reconciliation& r, const Admission& admission, const json& evicted) {
  const std::string workload = MetaString(evicted, "name");
  const bool stopping = r.CoordinatorActive() || WorkerPodsLeft(r);
  const std::string message =
      absl::StrCat("Kueue evicted Workload ", workload, " (", admission.reason, "): ",
                   admission.message, "; the job resumes from its last checkpoint when admitted again");
  if (r.phase_before != kPhaseSuspended) {
    r.desired.evictions = r.status.evictions.value_or(0) + 1;
  }
  Hold(r, admission.reason, message, "Warning");
  if (stopping) return;
  if (IsWorkloadSlice(evicted)) {
    r.actions.delete_workload = true;
  } else {
    r.actions.workload_status = WorkloadStatusEdit{true, "", ""};
  }
}

// How long a job runs on after Kueue finished its Workload for a slice that
// replaces it, waiting to see the slice admitted (Kueue writes one just
// before the other; should the second write not come, the job queues again).
constexpr absl::Duration kSliceAdmissionWait = absl::Seconds(10);

// Admitted in part: with Kueue's elastic workloads, a slice asking for the
// largest shape's pods, which replaces the Workload when Kueue admits it
// (made again until the cache has it; the Event once per admission, when
// `announce`).
void AskToGrow(Reconciliation& r, const json& workload, int most, bool announce) {
  if (!r.options.kueue_workload_slices || r.world.workload_slice) return;
  const std::string slice = NextWorkloadName(r.job.metadata, MetaString(workload, "name"));
  r.actions.create_workload = WorkloadSlice(r.job, workload, slice, most);
  if (!announce) return;
  r.Event("Normal", "GrowthQueued",
          absl::StrCat("Workload slice ", slice, " asks Kueue for all ", most,
                       " worker pods; it replaces Workload ", MetaString(workload, "name"),
                       " when admitted, and the job grows at its next checkpoint"));
}

// No Workload yet: it is made (for an elastic job, with its minCount), and
// the job waits Suspended; or the WorkloadPriorityClass its label names is
// missing, which is said.
void QueueWorkload(Reconciliation& r, const std::string& name, WorkerCount workers) {
  const std::string queue = QueueName(r.job.metadata);
  const std::string priority_class = PriorityClassName(r.job.metadata);
  if (!priority_class.empty() && !r.world.priority_class) {
    Hold(r, "PriorityClassNotFound",
         absl::StrCat("no WorkloadPriorityClass \"", priority_class, "\" (label ",
                      kPriorityClassLabel, "): create it, or take the label off"),
         "Warning");
    r.actions.requeue_after = r.options.poll_interval;  // no watch on the classes
    return;
  }
  r.actions.create_workload = JobWorkload(r.job, name, workers, WorkerPod(r.job, 0, r.options),
                                          r.world.priority_class);
  Hold(r, "Queued",
       absl::StrCat("Workload ", name, " queued in LocalQueue ", queue, " for ",
                    workers.fewest < workers.most
                        ? absl::StrCat(workers.fewest, " to ", workers.most)
                        : absl::StrCat(workers.most),
                    " worker pods; waiting for Kueue to admit it"));
}

// Admitted: the pods Kueue admitted (all, or for an elastic job as many as
// partial admission gave, asking to grow with a slice), the condition, and
// an Event when admitted or grown.
int Admitted(Reconciliation& r, const json& workload, const Admission& admission,
             WorkerCount workers) {
  const std::string name = MetaString(workload, "name");
  const std::string queue = QueueName(r.job.metadata);
  const std::string before = r.ObservedReason("Admitted", "True");
  // Kueue's partial admission: fewer pods than asked for, never fewer than
  // the minCount (nor more than the count) of the Workload.
  const int admitted = std::clamp(admission.admitted_workers.value_or(workers.most),
                                  workers.fewest, workers.most);
  std::string message = absl::StrCat("Workload ", name, " admitted by ClusterQueue ",
                                     admission.cluster_queue, " (LocalQueue ", queue, ")");
  if (admitted < workers.most) {
    absl::StrAppend(&message, " for ", admitted, " of its ", workers.most,
                    " worker pods (partial admission)");
  }
  const kube::Condition* observed = r.status.FindCondition("Admitted");
  const bool new_admission = observed == nullptr || observed->message != message;
  r.desired.workload = name;
  r.SetCondition("Admitted", true, "Admitted", message);
  // An Event when admitted, and when a slice replaced the Workload (the job grows).
  if (before.empty() || name != r.status.workload) r.Event("Normal", "Admitted", message);
  if (admitted < workers.most) AskToGrow(r, workload, workers.most, new_admission);
  return admitted;
}

}  // namespace

std::optional<int> KueueAdmits(Reconciliation& r, WorkerCount workers) {
  if (!Queued(r)) return workers.most;
  const std::string name = JobWorkloadName(r);
  const std::string queue = QueueName(r.job.metadata);
  const json* workload = r.world.workload ? &*r.world.workload : nullptr;
  if (workload != nullptr && BeingDeleted(*workload)) {
    Hold(r, "Queued", absl::StrCat("waiting for the job's previous Workload ", name, " to go"));
    return std::nullopt;
  }
  if (workload == nullptr) {
    QueueWorkload(r, name, workers);
    return std::nullopt;
  }
  const Admission admission = ReadAdmission(*workload);
  switch (admission.state) {
    case Admission::kReplaced:
      // Between Kueue finishing it and admitting the slice that replaces it:
      // the job runs on as it was admitted, for a while.
      if (r.world.workload_slice && r.world.now - admission.since < kSliceAdmissionWait) {
        r.actions.requeue_after = absl::Seconds(1);
        return std::clamp(admission.admitted_workers.value_or(workers.fewest), workers.fewest,
                          workers.most);
      }
      [[fallthrough]];
    case Admission::kFinished:
      // It ended with the job's last run, and the job runs again (a changed
      // spec after a failure): a Workload of its own for this run.
      r.actions.delete_workload = true;
      Hold(r, "Queued",
           admission.state == Admission::kReplaced
               ? absl::StrCat("Workload ", name, " was replaced by a slice that Kueue did not admit; ",
                              "queueing a new one")
               : absl::StrCat("Workload ", name,
                              " ended with the job's last run; queueing a new one"));
      return std::nullopt;
    case Admission::kEvicted:
      Evict(r, admission, *workload);
      return std::nullopt;
    case Admission::kPending:
      Hold(r, admission.reason,
           absl::StrCat("Workload ", name, " in LocalQueue ", queue, ": ", admission.message),
           admission.reason == "Inadmissible" ? "Warning" : "Normal");
      return std::nullopt;
    case Admission::kAdmitted:
      break;
  }
  return Admitted(r, *workload, admission, workers);
}

void FinishWorkload(Reconciliation& r) {
  if (!Queued(r)) return;
  DropWorkloadSlice(r);
  if (!r.world.workload || BeingDeleted(*r.world.workload)) return;
  if (const Admission::State state = ReadAdmission(*r.world.workload).state;
      state == Admission::kFinished || state == Admission::kReplaced) {
    return;
  }
  const std::string& phase = r.status.phase;
  r.actions.workload_status =
      WorkloadStatusEdit{false, phase, absl::StrCat("TrainingJob ", phase, ": ", r.status.message)};
}

void DropWorkload(Reconciliation& r) {
  DropWorkloadSlice(r);
  if (r.world.workload && !BeingDeleted(*r.world.workload)) r.actions.delete_workload = true;
}

}  // namespace paci::op
