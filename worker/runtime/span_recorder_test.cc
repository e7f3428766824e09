#include "worker/runtime/span_recorder.h"

#include <thread>

#include "gtest/gtest.h"

namespace paci {
namespace {

const absl::Time kT0 = absl::FromUnixMicros(1'700'000'000'000'000);

absl::Time At(int64_t micros) { return kT0 + absl::Microseconds(micros); }

TEST(SpanRecorderTest, RecordsSpansWithTimesAndIdsAndHandsThemOutOnce) {
  SpanRecorder recorder(100);
  recorder.Record(v1::Span::FORWARD, At(0), At(10), 7);
  recorder.Record(v1::Span::SEND, At(10), At(12), 7);
  recorder.Record(v1::Span::OPTIMIZER_STEP, At(12), At(20), std::nullopt, 3);
  std::vector<v1::Span> spans = recorder.Take();
  ASSERT_EQ(spans.size(), 3u);
  EXPECT_EQ(spans[0].kind(), v1::Span::FORWARD);
  EXPECT_EQ(spans[0].start_unix_micros(), absl::ToUnixMicros(kT0));
  EXPECT_EQ(spans[0].end_unix_micros() - spans[0].start_unix_micros(), 10);
  EXPECT_EQ(spans[0].micro_batch_id(), 7u);
  EXPECT_FALSE(spans[0].has_step());
  EXPECT_EQ(spans[1].start_unix_micros(), spans[0].end_unix_micros());
  EXPECT_TRUE(spans[2].has_step());
  EXPECT_FALSE(spans[2].has_micro_batch_id());
  EXPECT_EQ(spans[2].step(), 3);
  EXPECT_TRUE(recorder.Take().empty());
}

TEST(SpanRecorderTest, ContiguousIdleWaitsBecomeOneSpanUntilTaken) {
  SpanRecorder recorder(100);
  recorder.Record(v1::Span::IDLE, At(0), At(100));
  recorder.Record(v1::Span::IDLE, At(100), At(200));
  recorder.Record(v1::Span::IDLE, At(200), At(300));
  std::vector<v1::Span> spans = recorder.Take();
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].end_unix_micros() - spans[0].start_unix_micros(), 300);
  // After a take, the next wait starts a new span (the old one is shipped).
  recorder.Record(v1::Span::IDLE, At(300), At(400));
  EXPECT_EQ(recorder.Take().size(), 1u);
}

TEST(SpanRecorderTest, SpansNeverOverlapEvenWhenTheClockStepsBack) {
  SpanRecorder recorder(100);
  recorder.Record(v1::Span::FORWARD, At(100), At(200), 1);
  recorder.Record(v1::Span::BACKWARD, At(150), At(300), 1);  // begins before the last end
  recorder.Record(v1::Span::SEND, At(250), At(280), 1);      // ends before it: left out
  std::vector<v1::Span> spans = recorder.Take();
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[1].start_unix_micros(), spans[0].end_unix_micros());
  EXPECT_EQ(spans[1].end_unix_micros(), absl::ToUnixMicros(At(300)));
}

TEST(SpanRecorderTest, KeepsOnlyTheFirstMaxSpansAndCountsTheRest) {
  SpanRecorder recorder(3);
  for (int i = 0; i < 5; ++i) {
    recorder.Record(v1::Span::FORWARD, At(10 * i), At(10 * i + 5), i);
    if (i == 1) {
      EXPECT_EQ(recorder.Take().size(), 2u);
    }
  }
  EXPECT_EQ(recorder.Take().size(), 1u);
  EXPECT_EQ(recorder.dropped(), 2);
  SpanRecorder none(0);
  none.Record(v1::Span::FORWARD, At(0), At(5), 0);
  EXPECT_TRUE(none.Take().empty());
  EXPECT_EQ(none.dropped(), 1);
}

TEST(SpanRecorderTest, RecordAndTakeFromTwoThreadsLoseNothing) {
  SpanRecorder recorder(1'000'000);
  constexpr int kSpans = 20000;
  std::thread writer([&recorder] {
    for (int i = 0; i < kSpans; ++i) {
      recorder.Record(v1::Span::FORWARD, At(2 * i), At(2 * i + 1), i);
    }
  });
  size_t taken = 0;
  int64_t last_end = 0;
  while (taken < kSpans) {
    for (const v1::Span& span : recorder.Take()) {
      EXPECT_GE(span.start_unix_micros(), last_end);
      last_end = span.end_unix_micros();
      ++taken;
    }
  }
  writer.join();
  EXPECT_EQ(taken, static_cast<size_t>(kSpans));
}

}  // namespace
}  // namespace paci
