#include "worker/runtime/span_recorder.h"

#include <algorithm>
#include <utility>

namespace paci {

SpanRecorder::SpanRecorder(int64_t max_spans) : max_spans_(std::max<int64_t>(max_spans, 0)) {}

void SpanRecorder::Record(v1::Span::Kind kind, absl::Time start, absl::Time end,
                          std::optional<uint64_t> micro_batch_id, std::optional<int64_t> step) {
  int64_t start_us = absl::ToUnixMicros(start);
  int64_t end_us = absl::ToUnixMicros(end);
  absl::MutexLock lock(&mu_);
  start_us = std::max(start_us, last_end_);
  end_us = std::max(end_us, start_us);
  if (end_us == start_us) return;
  if (kind == v1::Span::IDLE && !pending_.empty() && pending_.back().kind() == v1::Span::IDLE &&
      pending_.back().end_unix_micros() == start_us) {
    pending_.back().set_end_unix_micros(end_us);
    last_end_ = end_us;
    return;
  }
  if (recorded_ >= max_spans_) {
    ++dropped_;
    return;
  }
  v1::Span& span = pending_.emplace_back();
  span.set_kind(kind);
  span.set_start_unix_micros(start_us);
  span.set_end_unix_micros(end_us);
  if (micro_batch_id) span.set_micro_batch_id(*micro_batch_id);
  if (step) span.set_step(*step);
  ++recorded_;
  last_end_ = end_us;
}

std::vector<v1::Span> SpanRecorder::Take() {
  absl::MutexLock lock(&mu_);
  return std::exchange(pending_, {});
}

int64_t SpanRecorder::dropped() const {
  absl::MutexLock lock(&mu_);
  return dropped_;
}

}  // namespace paci
