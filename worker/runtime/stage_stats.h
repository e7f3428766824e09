#pragma once

#include <cstdint>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "paci/v1/stage.pb.h"
#include "worker/runtime/span_recorder.h"
#include "worker/runtime/stage_metrics.h"

namespace paci {

// One stage's counters, kept once and fed to both of their readers: the
// Prometheus series (StageMetrics) and the StageReport the coordinator gets.
// Each event is one call here; the report's loss points and checkpoints are
// the ones recorded since the last Take.
//
// Thread-safe: the compute thread records, a reporting thread takes.
class StageStats {
 public:
  StageStats(StageMetrics& metrics, const std::string& job_name, int stage, int replica);

  // Set once the stage is built.
  void SetPartition(const std::string& units, double predicted_cost_share);
  // runtime.precision as the stage resolved it, and its note (StagePlacement).
  void SetPrecision(const std::string& precision, const std::string& note);
  void SetStart(int64_t drift_bound, int64_t optimizer_steps);

  // A span of the compute thread ended: busy, or idle waiting for a tensor.
  void AddSpan(bool idle, double seconds);
  void AddForward(int64_t forwards_so_far);
  // A backward of `drift` steps' staleness and `tokens` tokens; the counts so
  // far and the weights' hash (with replicas) after it.
  void AddBackward(int64_t backwards_so_far, int64_t optimizer_steps, int64_t drift,
                   int64_t tokens, uint32_t weights_hash);
  void AddOptimizerStep(double gradient_norm);
  void AddNonfiniteSkip();
  void ObserveAllReduce(double seconds);
  void AddBytesSent(bool forward, int64_t bytes);
  void AddTrainLoss(int64_t step, double loss, double seconds);
  void AddValidationLoss(int64_t step, double loss, double seconds);
  void AddCheckpoint(const std::string& path, int64_t step);
  void SetFinished(bool finished);
  void SetPeakRss(int64_t bytes);

  // The report so far, with the spans `spans` recorded since the last call
  // (null: none); the points and checkpoints in it are not returned again.
  v1::StageReport Take(SpanRecorder* spans);
  // The counters as they are, taking nothing.
  v1::StageReport Peek() const;

 private:
  StageMetrics& metrics_;
  mutable absl::Mutex mu_;
  v1::StageReport report_ ABSL_GUARDED_BY(mu_);
};

// This process's peak resident set, in bytes.
int64_t PeakRssBytes();

}  // namespace paci
