#include "operator/operator_metrics.h"

namespace paci::op {

using nlohmann::json;

namespace {
prometheus::Family<prometheus::Gauge>& JobGauge(prometheus::Registry& registry, const char* name,
                                                const char* help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(registry);
}
}  // namespace

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
      jobs_(prometheus::BuildGauge()
                .Name("paci_operator_trainingjobs")
                .Help("TrainingJobs by phase")
                .Register(*registry_)),
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
      job_step_(JobGauge(*registry_, "paci_operator_trainingjob_step",
                         "Optimizer steps of the slowest stage, per TrainingJob")),
      job_train_loss_(JobGauge(*registry_, "paci_operator_trainingjob_train_loss",
                               "Latest training loss, per TrainingJob")),
      job_validation_loss_(JobGauge(*registry_, "paci_operator_trainingjob_validation_loss",
                                    "Latest validation loss, per TrainingJob")),
      job_drift_(JobGauge(*registry_, "paci_operator_trainingjob_weight_drift_max_steps",
                          "Largest weight drift seen on any stage, per TrainingJob")),
      job_tokens_per_second_(JobGauge(*registry_, "paci_operator_trainingjob_tokens_per_second",
                                      "Training throughput, per TrainingJob")) {
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

void OperatorMetrics::SetJobPhases(const std::map<std::string, int>& counts) {
  for (const char* phase :
       {"Pending", "Suspended", "Running", "Restarting", "Succeeded", "Failed", "Cancelled"}) {
    auto it = counts.find(phase);
    jobs_.Add({{"phase", phase}}).Set(it == counts.end() ? 0 : it->second);
  }
}

void OperatorMetrics::SetJob(const std::string& ns, const std::string& name, const json& status) {
  const prometheus::Labels labels = {{"namespace", ns}, {"name", name}};
  auto number = [&](const char* key) {
    const json& value = status.value(key, json());
    return value.is_number() ? value.get<double>() : 0.0;
  };
  job_step_.Add(labels).Set(number("step"));
  job_train_loss_.Add(labels).Set(number("trainLoss"));
  job_validation_loss_.Add(labels).Set(number("validationLoss"));
  job_drift_.Add(labels).Set(number("maxDrift"));
  job_tokens_per_second_.Add(labels).Set(number("tokensPerSecond"));
}

void OperatorMetrics::RemoveJob(const std::string& ns, const std::string& name) {
  const prometheus::Labels labels = {{"namespace", ns}, {"name", name}};
  for (auto* family : {&job_step_, &job_train_loss_, &job_validation_loss_, &job_drift_,
                       &job_tokens_per_second_}) {
    family->Remove(&family->Add(labels));
  }
}

}  // namespace paci::op
