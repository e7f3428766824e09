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
      scheduling_latency_(prometheus::BuildHistogram()
                              .Name("paci_coordinator_scheduling_latency_seconds")
                              .Help("Seconds from queued to placed on workers")
                              .Register(r)
                              .Add({}, prometheus::Histogram::BucketBoundaries{
                                           0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 30, 300})),
      removals_(prometheus::BuildCounter()
                    .Name("paci_coordinator_jobs_removed_total")
                    .Help("Finished jobs removed by retention, by reason (count, age)")
                    .Register(r)),
      store_errors_(prometheus::BuildCounter()
                        .Name("paci_coordinator_store_errors_total")
                        .Help("Batches of job writes the store refused (retried on the job's "
                              "next change)")
                        .Register(r)
                        .Add({})),
      job_restarts_(prometheus::BuildCounter()
                        .Name("paci_job_restarts_total")
                        .Help("Restarts of a job after a failed stage or a dead worker")
                        .Register(r)),
      job_step_(prometheus::BuildGauge()
                    .Name("paci_job_step")
                    .Help("Optimizer steps of the job's slowest stage")
                    .Register(r)),
      job_train_loss_(prometheus::BuildGauge()
                          .Name("paci_job_train_loss")
                          .Help("Latest training loss of a job")
                          .Register(r)),
      job_validation_loss_(prometheus::BuildGauge()
                               .Name("paci_job_validation_loss")
                               .Help("Latest validation loss of a job")
                               .Register(r)),
      job_stages_(prometheus::BuildGauge()
                      .Name("paci_job_stages")
                      .Help("Pipeline stages P the job runs at (an elastic job's changes)")
                      .Register(r)),
      job_replicas_(prometheus::BuildGauge()
                        .Name("paci_job_replicas")
                        .Help("Data-parallel replicas R the job runs at")
                        .Register(r)),
      job_resizes_(prometheus::BuildCounter()
                       .Name("paci_job_resizes_total")
                       .Help("Changes of shape of an elastic job (pipeline.elastic)")
                       .Register(r)),
      job_resize_seconds_(prometheus::BuildCounter()
                              .Name("paci_job_resize_seconds_total")
                              .Help("Seconds from each resize decision to the placement at the "
                                    "new shape")
                              .Register(r)) {
  // Both reasons from the start, at 0, so the first removal is an increase.
  for (const char* reason : {"count", "age"}) removals_.Add({{"reason", reason}});
}

void CoordinatorMetrics::SetJobsInPhase(const std::string& phase, double count) {
  jobs_.Add({{"phase", phase}}).Set(count);
}

void CoordinatorMetrics::SetWorkers(const std::string& state, double count) {
  workers_.Add({{"state", state}}).Set(count);
}

void CoordinatorMetrics::TrackJob(const std::string& training_job) {
  for (auto* family : {&job_restarts_, &job_resizes_, &job_resize_seconds_}) {
    family->Add({{"training_job", training_job}});
  }
}

void CoordinatorMetrics::SetJobShape(const std::string& training_job, int stages, int replicas) {
  job_stages_.Add({{"training_job", training_job}}).Set(stages);
  job_replicas_.Add({{"training_job", training_job}}).Set(replicas);
}

void CoordinatorMetrics::AddResize(const std::string& training_job) {
  job_resizes_.Add({{"training_job", training_job}}).Increment();
}

void CoordinatorMetrics::AddResizeSeconds(const std::string& training_job, double seconds) {
  job_resize_seconds_.Add({{"training_job", training_job}}).Increment(seconds);
}

void CoordinatorMetrics::AddRestart(const std::string& training_job) {
  job_restarts_.Add({{"training_job", training_job}}).Increment();
}

void CoordinatorMetrics::RemoveJob(const std::string& training_job, const std::string& reason) {
  removals_.Add({{"reason", reason}}).Increment();
  const prometheus::Labels labels = {{"training_job", training_job}};
  for (auto* family : {&job_restarts_, &job_resizes_, &job_resize_seconds_}) {
    if (family->Has(labels)) family->Remove(&family->Add(labels));
  }
  for (auto* family :
       {&job_step_, &job_train_loss_, &job_validation_loss_, &job_stages_, &job_replicas_}) {
    if (family->Has(labels)) family->Remove(&family->Add(labels));
  }
}

void CoordinatorMetrics::SetJobProgress(const std::string& training_job, double step,
                                        double train_loss, double validation_loss) {
  const prometheus::Labels labels = {{"training_job", training_job}};
  job_step_.Add(labels).Set(step);
  job_train_loss_.Add(labels).Set(train_loss);
  job_validation_loss_.Add(labels).Set(validation_loss);
}

}  // namespace paci
