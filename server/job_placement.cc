#include "server/job_placement.h"

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/peer_identity.h"
#include "common/random.h"

namespace paci {

int SlotOf(const v1::JobSpec& spec, int stage, int replica) {
  const int P = spec.pipeline().num_stages();
  if (stage < 0 || stage >= P || replica < 0 || (replica + 1) * P > WorkersOf(spec.pipeline())) {
    return -1;
  }
  return replica * P + stage;
}

std::string SlotName(const v1::JobSpec& spec, int slot) {
  const int P = spec.pipeline().num_stages();
  return StageName(spec.pipeline(), slot % P, slot / P);
}

PendingJob AsPending(const v1::Job& job, int64_t sequence) {
  PendingJob pending;
  pending.name = job.name();
  pending.priority = job.spec().run_policy().priority();
  pending.sequence = sequence;
  pending.num_workers = WorkersOf(job.spec().pipeline());
  for (const auto& [k, v] : job.spec().run_policy().worker_selector()) pending.selector[k] = v;
  // The job's namespace, not what its selector may say of one.
  pending.selector[kNamespaceLabel] = NamespaceOfLabels(job.labels());
  return pending;
}

absl::Status CheckMayRun(const v1::Job& job,
                         const std::map<std::string, std::string>& worker_labels) {
  const std::string not_its = absl::StrCat("register.running.job_name: job \"", job.name(),
                                           "\" is not one this worker runs: ");
  const std::string never = "; it was never placed on it";
  // The namespace first: it says why a stranger's claim is refused.
  if (const std::string worker_namespace = NamespaceOfLabels(worker_labels);
      worker_namespace != NamespaceOfLabels(job.labels())) {
    return absl::PermissionDeniedError(absl::StrCat(
        not_its, "its certificate places it on the jobs of ",
        worker_namespace.empty() ? std::string("no namespace")
                                 : absl::StrCat("namespace ", worker_namespace),
        " only", never));
  }
  // Then the rest of what placement asks (AsPending): the job's selector.
  const PendingJob pending = AsPending(job, 0);
  if (const std::string* key = UnmatchedLabel(worker_labels, pending.selector)) {
    return absl::PermissionDeniedError(absl::StrCat(
        not_its, "it does not carry the label ", *key,
        " as the job's run_policy.worker_selector asks", never));
  }
  return absl::OkStatus();
}

void StartAttempt(JobState& state, const WorkerRegistry& workers,
                  const std::vector<std::string>& worker_ids, absl::Time now) {
  v1::JobStatus& status = state.status();
  status.set_attempt(status.attempt() + 1);
  const int P = state.spec().pipeline().num_stages();
  const int slots = static_cast<int>(worker_ids.size());  // P x R
  state.stages.assign(slots, StageProgress{});
  for (auto& stage : state.stages) stage.last_progress = now;
  state.link_secret = RandomHex(16);
  state.attempt_started = now;
  status.clear_stages();
  state.trace.Clear();
  state.trace.set_name(state.name());
  for (int w = 0; w < slots; ++w) {
    v1::StageTrace* trace = state.trace.add_stages();
    trace->set_stage(w % P);
    trace->set_replica(w / P);
    const v1::WorkerRegistration& worker = workers.at(worker_ids[w]).registration;
    v1::StageStatus* stage = status.add_stages();
    stage->set_stage(w % P);
    stage->set_replica(w / P);
    stage->set_worker_id(worker_ids[w]);
    stage->set_link_address(worker.link_address());
    stage->set_metrics_address(worker.metrics_address());
    stage->set_pid(worker.pid());
  }
}

JobState RecoveredJob(v1::Job job, absl::Time now) {
  JobState state;
  state.queued_since = now;
  state.last_persisted = now;  // as it is in the store
  state.job = std::move(job);
  if (state.status().phase() == v1::RUNNING) {
    state.awaiting_reconnect = true;
    state.stages.assign(state.status().stages_size(), StageProgress{});
    for (int s = 0; s < state.status().stages_size(); ++s) {
      state.stages[s].last_progress = now;
      state.stages[s].reconnected = state.finished(s);  // no worker to wait for
    }
    state.attempt_started = now;
  }
  const int64_t checkpoint = state.status().checkpoint_step();
  // An elastic job grows only at a checkpoint after this one, and not before
  // its least interval from now (what it was before the restart is not kept).
  state.seen_checkpoint = checkpoint;
  state.last_resize = now;
  if (checkpoint > 0) {
    for (int s = 0; s < state.spec().pipeline().num_stages(); ++s) {
      state.shards[checkpoint].insert(s);
    }
  }
  return state;
}

v1::StageAssignment AssignmentFor(const JobState& state, const WorkerRegistry& workers,
                                  uint64_t instance, int slot) {
  const int P = state.spec().pipeline().num_stages();
  const int stage = slot % P, replica = slot / P;
  v1::StageAssignment assignment;
  assignment.set_job_name(state.name());
  assignment.set_attempt(state.status().attempt());
  *assignment.mutable_job_create_time() = state.status().create_time();
  *assignment.mutable_spec() = state.spec();
  if (assignment.attempt() > 1 && !state.spec().checkpoint().directory().empty()) {
    assignment.mutable_spec()->mutable_checkpoint()->set_resume(true);
  }
  assignment.set_stage(stage);
  assignment.set_replica(replica);
  assignment.set_link_secret(state.link_secret);
  const int slots = static_cast<int>(state.stages.size());
  auto link = [&](int w) { return workers.at(state.worker(w)).registration.link_address(); };
  for (int s = 0; s < P; ++s) assignment.add_stage_addresses(link(replica * P + s));
  if (slots > P) {
    const v1::WorkerRegistration& first = workers.at(state.worker(stage)).registration;
    assignment.set_replica_store_address(first.store_address());
    assignment.set_replica_group(absl::StrCat(absl::Hex(instance), "/", state.sequence, "/",
                                              state.name(), "/", assignment.attempt(), "/stage-",
                                              stage));
    for (int w = stage; w < slots; w += P) {
      assignment.add_replica_addresses(link(w));
    }
  }
  return assignment;
}

std::vector<std::string> StalledStages(const JobState& state, absl::Time now,
                                       absl::Duration timeout) {
  std::vector<std::string> stalled;
  for (size_t s = 0; s < state.stages.size(); ++s) {
    if (!state.finished(static_cast<int>(s)) && now - state.stages[s].last_progress > timeout) {
      stalled.push_back(absl::StrCat(SlotName(state.spec(), static_cast<int>(s)), " on worker ",
                                     state.worker(static_cast<int>(s))));
    }
  }
  return stalled;
}

}  // namespace paci
