#include "server/coordinator_metrics.h"

namespace paci {

CoordinatorMetrics::CoordinatorMetrics(prometheus::Registry& r)
    : jobs_(prometheus::BuildGauge()
                .Name("paci_coordinator_jobs")
                .Help("Jobs the coordinator knows, by phase")
                .Register(r)),
      workers_(prometheus::BuildGauge()
                   .Name("paci_coordinator_workers")
                   .Help("Connected workers, by state (idle, busy, stopping)")
                   .Register(r)),
      submissions_(prometheus::BuildCounter()
                       .Name("paci_coordinator_submissions_total")
                       .Help("Jobs accepted by SubmitJob (new names only)")
                       .Register(r)
                       .Add({})),
      restarts_(prometheus::BuildCounter()
                    .Name("paci_coordinator_restarts_total")
                    .Help("Job restarts after a failed stage or a dead worker")
                    .Register(r)
                    .Add({})),
      scheduling_latency_(prometheus::BuildHistogram()
                              .Name("paci_coordinator_scheduling_latency_seconds")
                              .Help("Seconds from queued to placed on workers")
                              .Register(r)
                              .Add({}, prometheus::Histogram::BucketBoundaries{
                                           0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30, 300})),
      job_step_(prometheus::BuildGauge()
                    .Name("paci_job_step")
                    .Help("Optimizer steps of the slowest stage")
                    .Register(r)),
      job_train_loss_(prometheus::BuildGauge()
                          .Name("paci_job_train_loss")
                          .Help("Latest training loss of a job")
                          .Register(r)),
      job_validation_loss_(prometheus::BuildGauge()
                               .Name("paci_job_validation_loss")
                               .Help("Latest validation loss of a job")
                               .Register(r)),
      job_tokens_per_second_(prometheus::BuildGauge()
                                 .Name("paci_job_tokens_per_second")
                                 .Help("Training tokens per second of a job")
                                 .Register(r)),
      job_drift_max_(prometheus::BuildGauge()
                         .Name("paci_job_weight_drift_max_steps")
                         .Help("Largest drift any stage of a job has seen")
                         .Register(r)) {}

void CoordinatorMetrics::SetJobsInPhase(const std::string& phase, double count) {
  jobs_.Add({{"phase", phase}}).Set(count);
}

void CoordinatorMetrics::SetWorkers(const std::string& state, double count) {
  workers_.Add({{"state", state}}).Set(count);
}

void CoordinatorMetrics::SetJobProgress(const std::string& job, double step, double train_loss,
                                        double validation_loss, double tokens_per_second,
                                        double max_drift) {
  job_step_.Add({{"job", job}}).Set(step);
  job_train_loss_.Add({{"job", job}}).Set(train_loss);
  job_validation_loss_.Add({{"job", job}}).Set(validation_loss);
  job_tokens_per_second_.Add({{"job", job}}).Set(tokens_per_second);
  job_drift_max_.Add({{"job", job}}).Set(max_drift);
}

}  // namespace paci
