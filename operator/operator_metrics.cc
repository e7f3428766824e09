#include "operator/operator_metrics.h"

namespace paci::op {

namespace {

prometheus::Labels InfoLabels(const OperatorMetrics::TrainingJob& job) {
  return {{"namespace", job.ns}, {"trainingjob", job.name}, {"training_job", job.coordinator_job}};
}

prometheus::Labels PhaseLabels(const OperatorMetrics::TrainingJob& job, const std::string& phase) {
  return {{"namespace", job.ns}, {"trainingjob", job.name}, {"phase", phase}};
}

}  // namespace

const std::vector<std::string>& OperatorMetrics::Phases() {
  static const auto* phases = new std::vector<std::string>{
      "Pending", "Suspended", "Running", "Restarting", "Succeeded", "Failed", "Cancelled"};
  return *phases;
}

OperatorMetrics::OperatorMetrics()
    : registry_(std::make_shared<prometheus::Registry>()),
      reconciles_(prometheus::BuildCounter()
                      .Name("paci_operator_reconciles_total")
                      .Help("TrainingJob reconciles by result (success, error, requeue)")
                      .Register(*registry_)),
      reconcile_duration_(prometheus::BuildHistogram()
                              .Name("paci_operator_reconcile_duration_seconds")
                              .Help("Time to reconcile one TrainingJob, actions included")
                              .Register(*registry_)
                              .Add({}, prometheus::Histogram::BucketBoundaries{
                                           0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                           0.5, 1, 2.5, 5, 10})),
      leader_(prometheus::BuildGauge()
                  .Name("paci_operator_is_leader")
                  .Help("1 while this replica holds the leader lease")
                  .Register(*registry_)
                  .Add({})),
      kube_requests_(prometheus::BuildCounter()
                         .Name("paci_operator_kube_requests_total")
                         .Help("Kubernetes API requests by verb and HTTP code (0: no response)")
                         .Register(*registry_)),
      watch_restarts_(prometheus::BuildCounter()
                          .Name("paci_operator_watch_restarts_total")
                          .Help("Watches restarted, by resource and reason (dropped, expired)")
                          .Register(*registry_)),
      queue_depth_(prometheus::BuildGauge()
                       .Name("paci_operator_workqueue_depth")
                       .Help("TrainingJobs waiting to be reconciled")
                       .Register(*registry_)
                       .Add({})),
      job_info_(prometheus::BuildGauge()
                    .Name("paci_operator_trainingjob_info")
                    .Help("1 per TrainingJob: its namespace and name, and training_job, the "
                          "coordinator job it runs as (the label of the coordinator's and "
                          "workers' series)")
                    .Register(*registry_)),
      job_phase_(prometheus::BuildGauge()
                     .Name("paci_operator_trainingjob_status_phase")
                     .Help("1 for the phase of a TrainingJob's status, 0 for the others")
                     .Register(*registry_)) {
  // Every series exists from the start, so dashboards show 0 rather than nothing.
  for (const char* result : {"success", "error", "requeue"}) reconciles_.Add({{"result", result}});
  for (const char* resource : {"trainingjobs", "pods", "services"}) {
    for (const char* reason : {"dropped", "expired"}) {
      watch_restarts_.Add({{"resource", resource}, {"reason", reason}});
    }
  }
}

void OperatorMetrics::OnRequest(const std::string& verb, int code) {
  kube_requests_.Add({{"verb", verb}, {"code", std::to_string(code)}}).Increment();
}

void OperatorMetrics::WatchRestarted(const std::string& resource, const std::string& reason) {
  watch_restarts_.Add({{"resource", resource}, {"reason", reason}}).Increment();
}

void OperatorMetrics::RecordReconcile(const std::string& result, absl::Duration took) {
  reconciles_.Add({{"result", result}}).Increment();
  reconcile_duration_.Observe(absl::ToDoubleSeconds(took));
}

void OperatorMetrics::SetLeader(bool leader) { leader_.Set(leader ? 1 : 0); }

void OperatorMetrics::SetQueueDepth(size_t depth) { queue_depth_.Set(static_cast<double>(depth)); }

void OperatorMetrics::SetTrainingJob(const TrainingJob& job) {
  absl::MutexLock lock(&jobs_mutex_);
  auto [it, added] = jobs_.try_emplace(job.ns + "/" + job.name, job);
  if (!added) {
    if (it->second.coordinator_job == job.coordinator_job && it->second.phase == job.phase) return;
    if (it->second.coordinator_job != job.coordinator_job) {
      job_info_.Remove(&job_info_.Add(InfoLabels(it->second)));
    }
    it->second = job;
  }
  job_info_.Add(InfoLabels(job)).Set(1);
  for (const std::string& phase : Phases()) {
    job_phase_.Add(PhaseLabels(job, phase)).Set(phase == job.phase ? 1 : 0);
  }
}

void OperatorMetrics::RemoveTrainingJob(const std::string& ns, const std::string& name) {
  absl::MutexLock lock(&jobs_mutex_);
  auto it = jobs_.find(ns + "/" + name);
  if (it == jobs_.end()) return;
  job_info_.Remove(&job_info_.Add(InfoLabels(it->second)));
  for (const std::string& phase : Phases()) {
    job_phase_.Remove(&job_phase_.Add(PhaseLabels(it->second, phase)));
  }
  jobs_.erase(it);
}

}  // namespace paci::op
