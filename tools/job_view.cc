#include "tools/job_view.h"

#include <algorithm>

#include <google/protobuf/util/time_util.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/job_spec.h"
#include "common/run_summary.h"
#include "worker/model/partition.h"

namespace paci {
namespace {

using google::protobuf::util::TimeUtil;

absl::Time FromProto(const google::protobuf::Timestamp& t) {
  return absl::FromUnixMicros(TimeUtil::TimestampToMicroseconds(t));
}

std::string Age(const v1::Job& job, absl::Time now) {
  if (!job.status().has_create_time()) return "-";
  const int64_t s = absl::ToInt64Seconds(now - FromProto(job.status().create_time()));
  if (s < 120) return absl::StrCat(s, "s");
  if (s < 7200) return absl::StrCat(s / 60, "m");
  return absl::StrCat(s / 3600, "h");
}

std::string Loss(double loss, bool known) { return known ? absl::StrFormat("%.3f", loss) : "-"; }

}  // namespace

ProgressView ViewOfJob(const v1::Job& job, absl::Time now) {
  const v1::JobStatus& status = job.status();
  ProgressView view;
  view.num_stages = WorkersOf(job.spec().pipeline());
  view.joined = status.stages_size();
  view.step = status.step();
  view.total_steps = status.total_steps();
  if (status.train_loss_history_size() > 0) view.train_loss = status.train_loss();
  if (status.validation_loss_history_size() > 0) view.validation_loss = status.validation_loss();
  view.tokens_per_second = status.tokens_per_second();
  for (const auto& stage : status.stages()) view.drift_max.push_back(stage.drift_max());
  if (status.has_start_time() && status.step() > 0) {
    const absl::Duration elapsed = now - FromProto(status.start_time());
    view.eta = elapsed / status.step() * std::max<int64_t>(0, status.total_steps() - status.step());
  }
  return view;
}

v1::RunSummary SummaryOfJob(const v1::Job& job, double wall_seconds) {
  const v1::JobSpec& spec = job.spec();
  const v1::JobStatus& status = job.status();
  v1::RunSummary summary = RunSummaryOfJob(job);
  summary.set_wall_seconds(wall_seconds);
  for (const v1::StageStatus& s : status.stages()) {
    v1::StageSummary* out = summary.add_stages();
    out->set_stage(s.stage());
    out->set_replica(s.replica());
    out->set_weights_hash(s.weights_hash());
    out->set_drift_max(s.drift_max());
    out->set_drift_mean(s.drift_mean());
    out->set_drift_bound(s.drift_bound());
    out->set_optimizer_steps(s.optimizer_steps());
    out->set_forward_micro_batches(s.forward_micro_batches());
    out->set_backward_micro_batches(s.backward_micro_batches());
    out->set_busy_seconds(s.busy_seconds());
    out->set_idle_seconds(s.idle_seconds());
    const double total = s.busy_seconds() + s.idle_seconds();
    out->set_idle_fraction(total > 0 ? s.idle_seconds() / total : 0);
    out->set_peak_rss_bytes(s.peak_rss_bytes());
    out->set_bytes_sent(s.bytes_sent());
    out->set_metrics_address(s.metrics_address());
    out->set_link_address(s.link_address());
    out->set_precision(s.precision());
    out->set_precision_note(s.precision_note());
  }
  // The cut is a pure function of the spec (worker/model/partition.h), so the
  // summary computes the very plan the workers built, and splits the measured
  // busy time by its predicted shares.
  summary.set_partition(spec.pipeline().partition());
  const absl::StatusOr<PartitionPlan> plan = PlanPartition(spec);
  if (plan.ok()) {
    for (int b : plan->boundaries) summary.add_partition_boundaries(b);
    summary.set_partition_head_split(plan->head_split);
    double busy = 0;  // of one replica's pipeline: the replicas' mean
    for (const v1::StageSummary& st : summary.stages()) busy += st.busy_seconds();
    busy /= std::max(1, spec.pipeline().data_parallel());
    for (v1::StageSummary& st : *summary.mutable_stages()) {
      const int s = st.stage();
      if (s < 0 || s + 1 >= static_cast<int>(plan->boundaries.size())) continue;
      const StagePartition part = plan->Stage(s);
      st.set_first_unit(part.first_unit);
      st.set_end_unit(part.end_unit);
      st.set_units(part.Describe().substr(part.Describe().find(' ') + 1));
      st.set_predicted_cost_share(plan->cost_share[s]);
      st.set_predicted_busy_seconds(busy * plan->cost_share[s]);
    }
  }
  return summary;
}

std::string FormatJobTable(const std::vector<v1::Job>& jobs, absl::Time now) {
  std::string out = absl::StrFormat("%-24s %-11s %-12s %-7s %-8s %-9s %-9s %-8s %s\n", "NAME",
                                    "PHASE", "STEP", "LOSS", "VAL-LOSS", "TOK/S", "MAX-DRIFT",
                                    "RESTARTS", "AGE");
  for (const v1::Job& job : jobs) {
    const v1::JobStatus& s = job.status();
    int64_t drift = 0;
    for (const auto& stage : s.stages()) drift = std::max(drift, stage.drift_max());
    absl::StrAppend(&out, absl::StrFormat(
        "%-24s %-11s %-12s %-7s %-8s %-9s %-9d %-8d %s\n", job.name(), v1::JobPhase_Name(s.phase()),
        absl::StrCat(s.step(), "/", s.total_steps()),
        Loss(s.train_loss(), s.train_loss_history_size() > 0),
        Loss(s.validation_loss(), s.validation_loss_history_size() > 0),
        FormatThousands(static_cast<int64_t>(s.tokens_per_second())), drift, s.restarts(),
        Age(job, now)));
  }
  return out;
}

std::string FormatJobDetails(const v1::Job& job, absl::Time now) {
  const v1::JobStatus& s = job.status();
  std::string out = absl::StrCat(
      "name:       ", job.name(), "\nphase:      ", v1::JobPhase_Name(s.phase()),
      "\nreason:     ", s.reason(), "\nmessage:    ", s.message(), "\nstep:       ", s.step(),
      "/", s.total_steps(), "\ntrain loss: ",
      Loss(s.train_loss(), s.train_loss_history_size() > 0), "\nval loss:   ",
      Loss(s.validation_loss(), s.validation_loss_history_size() > 0), "\ntokens/s:   ",
      FormatThousands(static_cast<int64_t>(s.tokens_per_second())), "\ndrift:      limit ",
      DriftLimit(job.spec().pipeline()), " (accumulation ", job.spec().pipeline().accumulation(),
      ")\nrestarts:   ",
      s.restarts(), "\nattempt:    ", s.attempt(), "\ncheckpoint: step ", s.checkpoint_step(),
      "\nage:        ", Age(job, now), "\nconditions:\n");
  for (const auto& c : s.conditions()) {
    absl::StrAppend(&out, absl::StrFormat("  %-13s %-5s %-22s %s\n", c.type(),
                                          c.status() ? "True" : "False", c.reason(), c.message()));
  }
  absl::StrAppend(&out, "stages:\n");
  const v1::PipelineSpec& pipeline = job.spec().pipeline();
  for (const auto& st : s.stages()) {
    absl::StrAppend(&out, absl::StrFormat(
        "  %s  worker %-16s step %-8d drift %d/%d  busy %.1fs idle %.1fs  metrics http://%s/metrics\n",
        StageName(pipeline, st.stage(), st.replica()).substr(6), st.worker_id(),
        st.optimizer_steps(), st.drift_max(), st.drift_bound(), st.busy_seconds(),
        st.idle_seconds(), st.metrics_address()));
    if (pipeline.data_parallel() > 1) {
      absl::StrAppend(&out, absl::StrFormat("     weights hash %08x\n", st.weights_hash()));
    }
    if (st.nonfinite_steps_skipped() > 0) {
      absl::StrAppend(&out, "     skipped ", st.nonfinite_steps_skipped(),
                      " optimizer steps: NaN or Inf gradients\n");
    }
  }
  return out;
}

}  // namespace paci
