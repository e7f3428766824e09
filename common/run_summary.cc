#include "common/run_summary.h"

#include "common/job_spec.h"

namespace paci {

v1::RunSummary RunSummaryOfJob(const v1::Job& job) {
  const v1::JobSpec& spec = job.spec();
  const v1::JobStatus& status = job.status();
  v1::RunSummary summary;
  summary.set_job_name(job.name());
  summary.set_schedule(spec.pipeline().schedule());
  summary.set_num_stages(spec.pipeline().num_stages());
  summary.set_data_parallel(spec.pipeline().data_parallel());
  summary.set_accumulation(spec.pipeline().accumulation());
  summary.set_drift_limit(DriftLimit(spec.pipeline()));
  summary.set_drift_correction(spec.pipeline().drift_correction());
  summary.set_warmup_steps(spec.pipeline().warmup_steps());
  summary.set_global_batch(GlobalBatch(spec.pipeline()));
  summary.set_micro_batch_size(spec.pipeline().micro_batch_size());
  summary.set_seq_len(spec.model().seq_len());
  summary.set_steps(spec.training().steps());
  summary.set_succeeded(status.phase() == v1::SUCCEEDED);
  if (status.phase() != v1::SUCCEEDED) {
    summary.set_error(status.message().empty() ? v1::JobPhase_Name(status.phase())
                                               : status.message());
  }
  if (status.train_loss_history_size() > 0) summary.set_final_train_loss(status.train_loss());
  if (status.validation_loss_history_size() > 0) {
    summary.set_final_validation_loss(status.validation_loss());
  }
  summary.set_tokens_per_second(status.tokens_per_second());
  *summary.mutable_train_loss() = status.train_loss_history();
  *summary.mutable_validation_loss() = status.validation_loss_history();
  summary.set_steps_completed(status.step());
  return summary;
}

}  // namespace paci
