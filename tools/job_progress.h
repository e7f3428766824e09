#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "paci/v1/job.pb.h"
#include "paci/v1/stage.pb.h"
#include "paci/v1/summary.pb.h"

namespace paci {

// What the live progress line shows.
struct ProgressView {
  int num_stages = 0;
  int joined = 0;               // stages that have joined so far
  int64_t step = 0;             // min optimizer steps over all stages
  int64_t total_steps = 0;      // training.steps
  std::optional<double> train_loss;       // the latest point, if any
  std::optional<double> validation_loss;  // the latest point, if any
  double tokens_per_second = 0;           // 0 until the last stage reports tokens
  std::optional<absl::Duration> eta;      // unknown until a step is taken
  std::vector<int64_t> drift_max;         // per stage
};

// The first failure of a run: a stage's reported error, a worker that died,
// or the launcher's own reason ("interrupted"). stage is -1 when no stage is
// to blame.
struct JobFailure {
  int stage = -1;
  std::string message;

  // "stage 1: <message>", or the bare message without a stage.
  std::string ToString() const;
};

// Aggregates the joins and reports of one job's stages into the live progress
// view and the final RunSummary. Pure: no gRPC, no processes; time comes from
// the injected clock.
//
// Thread-safe: every method may be called from any thread (the gRPC handler
// threads feed it while the launcher's loop reads it).
class JobProgress {
 public:
  using Clock = std::function<absl::Time()>;

  // `spec` is a validated spec with defaults applied. The clock is read now
  // (the start of the wall time) and on every join, report and view.
  JobProgress(const v1::JobSpec& spec, Clock clock);

  // Records a stage's join. InvalidArgument if the stage is out of
  // [0, num_stages), AlreadyExists if it has already joined; nothing is
  // recorded then. The job name is the caller's to check.
  absl::Status OnJoin(const v1::JoinRequest& request);

  // Records a stage's report: its counters replace the previous ones, its
  // loss points, checkpoints and timeline spans are appended, and a non-empty
  // error becomes the job's failure unless one is already recorded.
  // InvalidArgument if the stage is out of range, FailedPrecondition if it has
  // not joined.
  absl::Status OnReport(const v1::StageReport& report);

  // Records a failure found outside the reports (a worker exit, an
  // interrupt). Ignored if a failure is already recorded: the first is kept.
  void RecordFailure(JobFailure failure);

  int joined() const;
  bool all_joined() const;
  // Every stage has sent a report with finished = true.
  bool all_finished() const;
  // `stage` has sent a report with finished = true.
  bool finished(int stage) const;
  std::optional<JobFailure> failure() const;
  // The StageLink address of every stage, index = stage; "" for stages that
  // have not joined.
  std::vector<std::string> stage_addresses() const;

  ProgressView View() const;

  // The timeline spans reported so far, index = stage, in the order recorded.
  std::vector<std::vector<v1::Span>> Spans() const;
  // Spans each stage could not record (past its bound), index = stage.
  std::vector<int64_t> SpansDropped() const;

  // The run so far. succeeded is true iff no failure is recorded and every
  // stage has finished; error is the failure, or says which stages did not
  // finish.
  v1::RunSummary Summary() const;

 private:
  struct Stage {
    bool joined = false;
    v1::JoinRequest join;
    v1::StageReport latest;  // without the loss points, checkpoints and spans
    std::vector<v1::Span> spans;
    bool reported = false;
    absl::Time last_report_time;
  };

  bool AllJoinedLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  int64_t MinStepsLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  double TokensPerSecondLocked() const ABSL_SHARED_LOCKS_REQUIRED(mu_);

  const v1::JobSpec spec_;
  const Clock clock_;
  const absl::Time start_time_;

  mutable absl::Mutex mu_;
  std::vector<Stage> stages_ ABSL_GUARDED_BY(mu_);
  int joined_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Time all_joined_time_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();
  std::vector<v1::LossPoint> train_loss_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::LossPoint> validation_loss_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> checkpoints_ ABSL_GUARDED_BY(mu_);
  std::optional<JobFailure> failure_ ABSL_GUARDED_BY(mu_);
};

}  // namespace paci
