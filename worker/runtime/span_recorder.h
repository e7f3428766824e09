#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "paci/v1/stage.pb.h"

namespace paci {

// The timeline of one stage's compute thread: forward, backward, optimizer
// step, send, eval, checkpoint and idle spans with their times, for the
// trace of a run (`pacictl train --trace`). Recording is cheap (a clock read
// by the caller and an append) and bounded: only the first `max_spans` spans
// are kept, later ones are counted as dropped. At ~6 spans per micro-batch,
// 100,000 spans cover the first ~16,000 micro-batches of a stage.
//
// A stage's spans never overlap: a span that would begin before the previous
// one ended (the wall clock stepped back) is clipped to begin there. An IDLE
// span that begins where a not yet taken IDLE span ended extends it, so a
// long wait made of many short waits is one span. Spans shorter than a
// microsecond after rounding are left out.
//
// Thread-safe: the compute thread records, the reporting thread takes.
class SpanRecorder {
 public:
  explicit SpanRecorder(int64_t max_spans);

  // Records [start, end) of `kind`. Never blocks for long (one mutex).
  void Record(v1::Span::Kind kind, absl::Time start, absl::Time end,
              std::optional<uint64_t> micro_batch_id = std::nullopt,
              std::optional<int64_t> step = std::nullopt);

  // The spans recorded since the last call, oldest first.
  std::vector<v1::Span> Take();

  // Spans not kept because max_spans were already recorded.
  int64_t dropped() const;

 private:
  const int64_t max_spans_;
  mutable absl::Mutex mu_;
  std::vector<v1::Span> pending_ ABSL_GUARDED_BY(mu_);  // recorded, not yet taken
  int64_t recorded_ ABSL_GUARDED_BY(mu_) = 0;           // kept, taken or not
  int64_t dropped_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_end_ ABSL_GUARDED_BY(mu_) = 0;           // micros; 0 before the first span
};

}  // namespace paci
