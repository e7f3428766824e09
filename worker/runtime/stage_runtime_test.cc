// StageRuntime on the CPU with a tiny model, its neighbours played by fake
// links in this process: a whole pipeline of one stage, the first stage of two
// whose fake next stage returns a gradient for each activation, and the last
// stage of two fed by a fake first stage.

#include "worker/runtime/stage_runtime.h"

#include <atomic>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include "absl/strings/str_cat.h"
#include "common/job_spec.h"
#include "common/schedule_kind.h"
#include "worker/model/lr_schedule.h"
#include "worker/runtime/replica_group.h"
#include "worker/runtime/stage_model.h"
#include "worker/transport/frame_sender.h"
#include "worker/transport/frame_validator.h"
#include "worker/transport/tensor_codec.h"

namespace paci {
namespace {

using ::testing::ElementsAre;

constexpr int kSteps = 4;
constexpr int kAccumulation = 2;
constexpr int kMicroBatches = kSteps * kAccumulation;
constexpr int kEvalBatches = 2;  // at steps 2 and 4
constexpr char kLinkId[] = "runtime-test/0";

// Edits a spec after its defaults (clip_norm, max_nonfinite_steps); null: none.
using SpecEdit = std::function<void(v1::JobSpec&)>;

v1::JobSpec Spec(int num_stages, const std::string& drift_correction = "none",
                 const SpecEdit& edit = nullptr) {
  absl::StatusOr<v1::JobSpec> spec = ParseJobSpecYaml(absl::StrCat(R"(
name: runtime-test
model: {vocab_size: 80, num_layers: 2, d_model: 16, num_heads: 2, seq_len: 16}
pipeline: {num_stages: )", num_stages, R"(, schedule: paci, accumulation: 2, micro_batch_size: 2,
           warmup_steps: 0, drift_correction: )", drift_correction, R"(}
optimizer: {lr: 3e-3}
training: {steps: 4, eval_interval: 2, eval_micro_batches: 2}
runtime: {threads_per_stage: 1}
data: {corpus_path: )", PACI_SOURCE_DIR, "/tests/data/kjv-genesis.txt}\n"));
  EXPECT_TRUE(spec.ok()) << spec.status();
  ApplyJobSpecDefaults(&*spec);
  if (edit) edit(*spec);
  EXPECT_TRUE(ValidateJobSpec(*spec).ok()) << ValidateJobSpec(*spec);
  return *spec;
}

// A neighbour in this process: keeps what the stage sends it and answers each
// frame through `answer` (into the stage's inbox, as the real one would).
class FakeLink final : public FrameSender {
 public:
  explicit FakeLink(std::function<void(const v1::TensorFrame&)> answer)
      : answer_(std::move(answer)) {}

  bool Send(v1::TensorFrame frame) override {
    answer_(frame);
    frames.push_back(std::move(frame));
    return true;
  }
  absl::Status Close(absl::Duration) override {
    ++closes;
    return absl::OkStatus();
  }

  // The micro-batch ids of the frames of `kind`, in the order sent.
  std::vector<uint64_t> Ids(v1::TensorFrame::Kind kind) const {
    std::vector<uint64_t> ids;
    for (const v1::TensorFrame& frame : frames) {
      if (frame.kind() == kind) ids.push_back(frame.micro_batch_id());
    }
    return ids;
  }
  std::vector<int64_t> EvalSteps() const {
    std::vector<int64_t> steps;
    for (const v1::TensorFrame& frame : frames) {
      if (frame.kind() == v1::TensorFrame::EVAL_ACTIVATION) steps.push_back(frame.step());
    }
    return steps;
  }

  std::vector<v1::TensorFrame> frames;
  int closes = 0;

 private:
  std::function<void(const v1::TensorFrame&)> answer_;
};

// A control or tensor frame from stage `from`; a hidden state of the spec's
// shape when `tensor`.
v1::TensorFrame Frame(v1::TensorFrame::Kind kind, int from, uint64_t micro_batch_id,
                      int64_t step = 0, bool tensor = false) {
  v1::TensorFrame frame;
  frame.set_kind(kind);
  frame.set_job_name(kLinkId);
  frame.set_from_stage(from);
  frame.set_micro_batch_id(micro_batch_id);
  frame.set_step(step);
  if (tensor) EncodeTensor(torch::randn({2, 16, 16}), &frame);
  return frame;
}

// One stage of Spec(num_stages) and what it works with; `previous` and `next`
// stand for the neighbours it has.
struct Stage {
  Stage(int num_stages, int stage, FrameSender* previous, FrameSender* next,
        const std::string& drift_correction = "none", const SpecEdit& edit = nullptr)
      : spec(Spec(num_stages, drift_correction, edit)),
        inbox(64),
        metrics(registry, spec.name(), stage, 0, num_stages,
                DriftBound(ScheduleKind::kPaci, num_stages, stage, kAccumulation),
                DriftBound(ScheduleKind::kPaci, num_stages, 0, kAccumulation)),
        spans(1000) {
    if (stage == 0 || stage == num_stages - 1) {
      CorpusOptions options;
      options.path = spec.data().corpus_path();
      options.seq_len = spec.model().seq_len();
      options.micro_batch_size = spec.pipeline().micro_batch_size();
      absl::StatusOr<Corpus> loaded = Corpus::Load(options);
      EXPECT_TRUE(loaded.ok()) << loaded.status();
      corpus = std::move(*loaded);
    }
    options.spec = spec;
    options.stage = stage;
    options.corpus = corpus ? &*corpus : nullptr;
    options.inbox = &inbox;
    options.previous = previous;
    options.next = next;
    options.spans = &spans;
    options.link_id = kLinkId;
  }

  // Builds the runtime (one of `replicas` when given), Inits and Runs it; the
  // report of the whole run.
  v1::StageReport Train(absl::Status* run_status = nullptr, GradientSync* replicas = nullptr) {
    options.gradient_sync = replicas;
    runtime.emplace(options, metrics);
    absl::Status status = runtime->Init();
    EXPECT_TRUE(status.ok()) << status;
    status = runtime->Run();
    if (run_status != nullptr) {
      *run_status = status;
    } else {
      EXPECT_TRUE(status.ok()) << status;
    }
    return runtime->TakeReport();
  }

  // The value of gauge or counter `name` on /metrics.
  double Metric(const std::string& name) {
    for (const prometheus::MetricFamily& family : registry.Collect()) {
      if (family.name != name || family.metric.empty()) continue;
      const prometheus::ClientMetric& m = family.metric.front();
      return family.type == prometheus::MetricType::Counter ? m.counter.value : m.gauge.value;
    }
    ADD_FAILURE() << "no metric " << name;
    return 0;
  }

  const v1::JobSpec spec;
  prometheus::Registry registry;
  Inbox inbox;
  StageMetrics metrics;
  SpanRecorder spans;
  std::optional<Corpus> corpus;
  StageRuntimeOptions options;
  std::optional<StageRuntime> runtime;
};

std::vector<int64_t> Steps(const google::protobuf::RepeatedPtrField<v1::LossPoint>& points) {
  std::vector<int64_t> steps;
  for (const v1::LossPoint& point : points) {
    EXPECT_TRUE(std::isfinite(point.loss()) && point.loss() > 0 && point.loss() < 10)
        << "step " << point.step() << " loss " << point.loss();
    steps.push_back(point.step());
  }
  return steps;
}

TEST(StageRuntimeTest, OneStageTrainsEvaluatesAndReports) {
  Stage stage(/*num_stages=*/1, /*stage=*/0, nullptr, nullptr);
  const v1::StageReport report = stage.Train();
  EXPECT_TRUE(report.finished());
  EXPECT_EQ(report.optimizer_steps(), kSteps);
  EXPECT_EQ(report.forward_micro_batches(), kMicroBatches);
  EXPECT_EQ(report.backward_micro_batches(), kMicroBatches);
  EXPECT_EQ(report.tokens(), kMicroBatches * 2 * 16);
  EXPECT_THAT(Steps(report.train_loss()), ElementsAre(1, 2, 3, 4));
  EXPECT_THAT(Steps(report.validation_loss()), ElementsAre(2, 4));
  EXPECT_EQ(report.bytes_sent(), 0);
  EXPECT_GT(report.spans_size(), kMicroBatches);  // a forward and a backward each, at least
  EXPECT_GT(report.busy_seconds(), 0);
}

// A clock that moves 1 ms at every read, from a start far from now.
class TickingClock final : public Clock {
 public:
  static constexpr absl::Time kStart = absl::FromUnixSeconds(1'800'000'000);
  absl::Time Now() const override { return kStart + absl::Milliseconds(ticks_.fetch_add(1) + 1); }
  bool AwaitWithDeadline(absl::Mutex& mutex, const absl::Condition& condition,
                         absl::Time deadline) override {
    return mutex.AwaitWithDeadline(condition, absl::Now() + (deadline - Now()));
  }
  int64_t ticks() const { return ticks_.load(); }

 private:
  mutable std::atomic<int64_t> ticks_{0};
};

TEST(StageRuntimeTest, SpansAndBusyTimeComeFromTheInjectedClock) {
  Stage stage(/*num_stages=*/1, /*stage=*/0, nullptr, nullptr);
  TickingClock clock;
  stage.options.clock = &clock;
  const v1::StageReport report = stage.Train();
  ASSERT_GT(report.spans_size(), kMicroBatches);
  const int64_t start = absl::ToUnixMicros(TickingClock::kStart);
  const int64_t end = start + clock.ticks() * 1000;
  for (const v1::Span& span : report.spans()) {
    EXPECT_GE(span.start_unix_micros(), start) << span.DebugString();
    EXPECT_LE(span.end_unix_micros(), end) << span.DebugString();
    EXPECT_EQ(span.start_unix_micros() % 1000, 0) << "not on a tick: " << span.DebugString();
  }
  // Each span is a whole number of ticks, so the busy and idle time are too,
  // and no more than the ticks the run took.
  const double seconds = report.busy_seconds() + report.idle_seconds();
  EXPECT_GT(seconds, 0);
  EXPECT_LE(seconds, clock.ticks() / 1000.0 + 1e-9);
  EXPECT_NEAR(report.busy_seconds() * 1000, std::round(report.busy_seconds() * 1000), 1e-6);
}

// pipeline.data_parallel: two replicas of a one-stage job, accumulation 2 each, in this
// process, train as one replica with accumulation 4: the same loss at every step (only the
// order of the float sums differs), the same weights on both replicas (by their hash), and
// only replica 0 reports losses.
TEST(StageRuntimeTest, TwoReplicasTrainAsOneWithTwiceTheAccumulation) {
  Stage one(1, 0, nullptr, nullptr, "none",
            [](v1::JobSpec& s) { s.mutable_pipeline()->set_accumulation(2 * kAccumulation); });
  const v1::StageReport alone = one.Train();
  auto store = ReplicaStoreServer::Reserve("127.0.0.1");
  ASSERT_TRUE(store.ok()) << store.status();
  ASSERT_TRUE((*store)->Serve().ok());
  const SpecEdit replicated = [](v1::JobSpec& s) { s.mutable_pipeline()->set_data_parallel(2); };
  std::vector<std::unique_ptr<Stage>> replicas;
  for (int r = 0; r < 2; ++r) {
    replicas.push_back(std::make_unique<Stage>(1, 0, nullptr, nullptr, "none", replicated));
  }
  std::vector<std::unique_ptr<ReplicaGroup>> groups(2);
  std::vector<v1::StageReport> reports(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      ReplicaGroupOptions o;
      o.store_address = (*store)->address();
      o.prefix = "runtime-test/1/stage-0";
      o.replica = r;
      o.num_replicas = 2;
      o.peer_addresses = {(*store)->address(), (*store)->address()};
      auto joined = ReplicaGroup::Join(o);
      ASSERT_TRUE(joined.ok()) << joined.status();
      groups[r] = std::move(*joined);
      reports[r] = replicas[r]->Train(nullptr, groups[r].get());
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_THAT(Steps(reports[0].train_loss()), ElementsAre(1, 2, 3, 4));
  ASSERT_EQ(reports[0].train_loss_size(), alone.train_loss_size());
  for (int i = 0; i < alone.train_loss_size(); ++i) {
    const double expected = alone.train_loss(i).loss();
    EXPECT_NEAR(reports[0].train_loss(i).loss(), expected, 1e-5 * expected) << "step " << i + 1;
  }
  EXPECT_THAT(Steps(reports[0].validation_loss()), ElementsAre(2, 4));
  EXPECT_EQ(reports[1].train_loss_size(), 0);  // replica 0 speaks for the job
  EXPECT_EQ(reports[1].validation_loss_size(), 0);
  EXPECT_EQ(reports[1].replica(), 1);
  EXPECT_EQ(reports[0].forward_micro_batches(), kMicroBatches);
  EXPECT_NE(reports[0].weights_hash(), 0u);
  EXPECT_EQ(reports[0].weights_hash(), reports[1].weights_hash());
  EXPECT_EQ(alone.weights_hash(), 0u);  // one replica: nothing to compare
  int reduces = 0;
  for (const v1::Span& span : reports[1].spans()) reduces += span.kind() == v1::Span::ALL_REDUCE;
  EXPECT_EQ(reduces, kSteps);
}

// Two stages of Spec(2) with `partition`, linked in this process (each link
// pushes into the other's inbox), trained at once; their reports. Each stage
// runs at its own runtime.precision, float32 unless said: whatever the CPU,
// the split's sums of parts equal the whole head's to float32's rounding,
// bfloat16's logits to their own (about 1e-5 of the loss).
std::pair<v1::StageReport, v1::StageReport> TrainTwoStages(
    const std::string& partition, const std::string& schedule, std::vector<v1::TensorFrame>* sent,
    const std::pair<std::string, std::string>& precisions = {"fp32", "fp32"}) {
  const auto cut = [&](const std::string& precision) -> SpecEdit {
    return [&partition, &schedule, precision](v1::JobSpec& s) {
      s.mutable_pipeline()->set_partition(partition);
      s.mutable_pipeline()->set_schedule(schedule);
      s.mutable_runtime()->set_precision(precision);
    };
  };
  Stage* stages[2] = {nullptr, nullptr};
  FakeLink to_next([&](const v1::TensorFrame& f) {
    stages[1]->inbox.Push(Inbox::From::kPrevious, f);
  });
  FakeLink to_previous([&](const v1::TensorFrame& f) {
    stages[0]->inbox.Push(Inbox::From::kNext, f);
  });
  Stage first(2, 0, nullptr, &to_next, "none", cut(precisions.first)),
      last(2, 1, &to_previous, nullptr, "none", cut(precisions.second));
  stages[0] = &first;
  stages[1] = &last;
  v1::StageReport reports[2];
  std::thread other([&] { reports[0] = first.Train(); });
  reports[1] = last.Train();
  other.join();
  if (sent != nullptr) {
    *sent = to_previous.frames;
    sent->insert(sent->end(), to_next.frames.begin(), to_next.frames.end());
  }
  return {reports[0], reports[1]};
}

// The head split by vocabulary between the two stages trains as the whole
// head on the last stage does: the same losses, training and validation,
// step for step; every micro-batch's part asked for, sent and scaled once.
// Under 1F1B-flush, whose weights do not change within a step: PACI's
// forwards meet the weights of whichever step the timing allows (within its
// drift bound), so two PACI runs need not agree to the bit; a PACI run with
// the split completes every exchange as well.
TEST(StageRuntimeTest, AHeadSplitByVocabularyTrainsAsTheWholeHeadDoes) {
  const auto [first_whole, last_whole] = TrainTwoStages("3", "1f1b-flush", nullptr);
  std::vector<v1::TensorFrame> sent;
  const auto [first_split, last_split] = TrainTwoStages("3/40", "1f1b-flush", &sent);
  EXPECT_EQ(first_split.partition_units(), "[0,3) emb..h0.mlp head rows [0,40)");
  EXPECT_EQ(last_split.partition_units(), "[3,6) h1.attn..head head rows [40,80)");
  EXPECT_THAT(Steps(last_split.train_loss()), ElementsAre(1, 2, 3, 4));
  ASSERT_EQ(last_split.train_loss_size(), last_whole.train_loss_size());
  for (int i = 0; i < last_whole.train_loss_size(); ++i) {
    const double expected = last_whole.train_loss(i).loss();
    EXPECT_NEAR(last_split.train_loss(i).loss(), expected, 1e-5 * expected) << "step " << i + 1;
  }
  EXPECT_THAT(Steps(last_split.validation_loss()), ElementsAre(2, 4));
  for (int i = 0; i < last_whole.validation_loss_size(); ++i) {
    const double expected = last_whole.validation_loss(i).loss();
    EXPECT_NEAR(last_split.validation_loss(i).loss(), expected, 1e-5 * expected)
        << "step " << 2 * (i + 1);
  }
  std::map<v1::TensorFrame::Kind, std::vector<uint64_t>> ids;
  for (const v1::TensorFrame& frame : sent) ids[frame.kind()].push_back(frame.micro_batch_id());
  std::vector<uint64_t> all(kMicroBatches);
  std::iota(all.begin(), all.end(), 0);
  EXPECT_EQ(ids[v1::TensorFrame::HEAD_INPUT], all);
  EXPECT_EQ(ids[v1::TensorFrame::HEAD_PART], all);
  EXPECT_EQ(ids[v1::TensorFrame::HEAD_SCALE], all);
  EXPECT_EQ(ids[v1::TensorFrame::HEAD_ROWS].size(), 2u);  // one per evaluation
  EXPECT_TRUE(first_split.finished() && last_split.finished());

  const auto [first_paci, last_paci] = TrainTwoStages("3/40", "paci", &sent);
  EXPECT_THAT(Steps(last_paci.train_loss()), ElementsAre(1, 2, 3, 4));
  EXPECT_THAT(Steps(last_paci.validation_loss()), ElementsAre(2, 4));
  ids.clear();
  for (const v1::TensorFrame& frame : sent) ids[frame.kind()].push_back(frame.micro_batch_id());
  EXPECT_EQ(ids[v1::TensorFrame::HEAD_SCALE], all);
  EXPECT_EQ(first_paci.backward_micro_batches(), kMicroBatches);
}

// The dtype of each kind of frame in `sent` that carries a tensor, checking
// that its bytes are its shape's in that dtype.
std::map<v1::TensorFrame::Kind, std::set<int>> FrameDtypes(const std::vector<v1::TensorFrame>& sent) {
  std::map<v1::TensorFrame::Kind, std::set<int>> dtypes;
  for (const v1::TensorFrame& frame : sent) {
    if (frame.shape().empty()) continue;
    int64_t numel = 1;
    for (int64_t d : frame.shape()) numel *= d;
    EXPECT_EQ(static_cast<int64_t>(frame.data().size()), numel * DTypeSize(frame.dtype()))
        << v1::TensorFrame::Kind_Name(frame.kind());
    dtypes[frame.kind()].insert(frame.dtype());
  }
  return dtypes;
}

// Under bf16 autocast a stage's activations, their gradients and the split
// head's input cross the links in bfloat16, half float32's bytes; the head's
// part, scales and rows stay float32. The training is float32's to
// bfloat16's rounding, and a float32 stage beside a bf16-autocast one (`auto`
// on two kinds of CPU) takes what it is sent in its own dtype.
TEST(StageRuntimeTest, UnderBf16AutocastActivationsAndGradientsCrossTheLinksInBfloat16) {
  using Kind = v1::TensorFrame;
  const std::set<int> f32 = {v1::DTYPE_FLOAT32}, bf16 = {v1::DTYPE_BFLOAT16};
  std::vector<v1::TensorFrame> sent;
  const v1::StageReport fp32_last = TrainTwoStages("3/40", "1f1b-flush", &sent).second;
  auto dtypes = FrameDtypes(sent);
  for (Kind::Kind kind : {Kind::ACTIVATION, Kind::GRADIENT, Kind::EVAL_ACTIVATION, Kind::HEAD_INPUT,
                          Kind::HEAD_PART, Kind::HEAD_SCALE, Kind::HEAD_ROWS}) {
    EXPECT_EQ(dtypes[kind], f32) << Kind::Kind_Name(kind);
  }
  const auto near_fp32 = [&](const v1::StageReport& last) {
    ASSERT_EQ(last.train_loss_size(), fp32_last.train_loss_size());
    for (int i = 0; i < last.train_loss_size(); ++i) {
      const double expected = fp32_last.train_loss(i).loss();
      EXPECT_NE(last.train_loss(i).loss(), expected);  // rounded: not float32's run
      EXPECT_NEAR(last.train_loss(i).loss(), expected, 1e-2 * expected) << "step " << i + 1;
    }
  };

  const auto [first, last] =
      TrainTwoStages("3/40", "1f1b-flush", &sent, {"bf16-autocast", "bf16-autocast"});
  dtypes = FrameDtypes(sent);
  for (Kind::Kind kind : {Kind::ACTIVATION, Kind::GRADIENT, Kind::EVAL_ACTIVATION, Kind::HEAD_INPUT}) {
    EXPECT_EQ(dtypes[kind], bf16) << Kind::Kind_Name(kind);
  }
  for (Kind::Kind kind : {Kind::HEAD_PART, Kind::HEAD_SCALE, Kind::HEAD_ROWS}) {
    EXPECT_EQ(dtypes[kind], f32) << Kind::Kind_Name(kind);
  }
  EXPECT_TRUE(first.finished() && last.finished());
  near_fp32(last);

  // Each stage sends in its own link dtype and computes in its own.
  const auto [mixed_first, mixed_last] =
      TrainTwoStages("3", "1f1b-flush", &sent, {"fp32", "bf16-autocast"});
  dtypes = FrameDtypes(sent);
  EXPECT_EQ(dtypes[Kind::ACTIVATION], f32);
  EXPECT_EQ(dtypes[Kind::GRADIENT], bf16);
  EXPECT_EQ(mixed_first.backward_micro_batches(), kMicroBatches);
  EXPECT_THAT(Steps(mixed_last.train_loss()), ElementsAre(1, 2, 3, 4));
  near_fp32(mixed_last);  // the head whole here: the same loss as split, to float32's rounding
}

// A last stage that asks for a second part of the head before it has sent
// the first one's scale breaks the protocol: the stage before it fails
// naming both micro-batches rather than keep parts without bound.
TEST(StageRuntimeTest, AHeadInputWhileAPartWaitsForItsScaleFailsTheStage) {
  Inbox* inbox = nullptr;
  FakeLink next([&inbox](const v1::TensorFrame& frame) {
    if (frame.kind() != v1::TensorFrame::ACTIVATION) return;
    for (int i = 0; i < 2; ++i) {
      v1::TensorFrame ask = frame;
      ask.set_kind(v1::TensorFrame::HEAD_INPUT);
      ask.set_from_stage(1);
      ask.set_micro_batch_id(frame.micro_batch_id() + i);
      inbox->Push(Inbox::From::kNext, std::move(ask));
    }
  });
  Stage stage(2, 0, nullptr, &next, "none",
              [](v1::JobSpec& s) { s.mutable_pipeline()->set_partition("3/40"); });
  inbox = &stage.inbox;
  absl::Status status;
  stage.Train(&status);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_NE(status.message().find("a HEAD_INPUT of micro-batch 1 arrived while micro-batch 0's "
                                  "part of the head still waits for its scale"),
            std::string::npos)
      << status;
  EXPECT_EQ(next.Ids(v1::TensorFrame::HEAD_PART), std::vector<uint64_t>{0});
}

TEST(StageRuntimeTest, FirstStageSendsActivationsAndTakesGradientsOverAFakeLink) {
  Inbox* inbox = nullptr;
  // The next stage: a gradient of the activation's shape for each activation.
  FakeLink next([&inbox](const v1::TensorFrame& frame) {
    if (frame.kind() != v1::TensorFrame::ACTIVATION) return;
    v1::TensorFrame gradient = frame;
    gradient.set_kind(v1::TensorFrame::GRADIENT);
    gradient.set_from_stage(1);
    inbox->Push(Inbox::From::kNext, std::move(gradient));
  });
  Stage stage(/*num_stages=*/2, /*stage=*/0, nullptr, &next);
  inbox = &stage.inbox;
  const v1::StageReport report = stage.Train();

  EXPECT_THAT(next.Ids(v1::TensorFrame::ACTIVATION), ElementsAre(0, 1, 2, 3, 4, 5, 6, 7));
  EXPECT_THAT(next.EvalSteps(), ElementsAre(2, 2, 4, 4));
  ASSERT_FALSE(next.frames.empty());
  EXPECT_EQ(next.frames.back().kind(), v1::TensorFrame::SHUTDOWN);
  for (const v1::TensorFrame& frame : next.frames) {
    EXPECT_EQ(frame.job_name(), kLinkId);
    EXPECT_EQ(frame.from_stage(), 0);
  }
  EXPECT_EQ(next.closes, 1);
  EXPECT_TRUE(report.finished());
  EXPECT_EQ(report.optimizer_steps(), kSteps);
  EXPECT_EQ(report.backward_micro_batches(), kMicroBatches);
  EXPECT_TRUE(report.train_loss().empty());  // the last stage's to report
  EXPECT_GT(report.bytes_sent(), 0);
}

// Stage 0 of 2 against a next stage that answers each activation only when the next one
// arrives (as a real, busy stage 1 does), and at once for the last before each evaluation
// (micro-batches 3 and 7), which drains the pipe: a deterministic order in which some
// micro-batches cross a step (drift 1, the bound) and others none. The activations it sends
// show its weights; returns them with the drift seen.
std::pair<std::vector<std::string>, int64_t> FirstStageActivations(const std::string& correction,
                                                                   const SpecEdit& edit = nullptr) {
  Inbox* inbox = nullptr;
  std::optional<v1::TensorFrame> held;
  FakeLink next([&inbox, &held](const v1::TensorFrame& frame) {
    if (frame.kind() != v1::TensorFrame::ACTIVATION) return;
    const auto answer = [&inbox](v1::TensorFrame gradient) {
      gradient.set_kind(v1::TensorFrame::GRADIENT);
      gradient.set_from_stage(1);
      inbox->Push(Inbox::From::kNext, std::move(gradient));
    };
    if (held) answer(*std::exchange(held, std::nullopt));
    if (frame.micro_batch_id() % 4 == 3) {
      answer(frame);
    } else {
      held = frame;
    }
  });
  Stage stage(/*num_stages=*/2, /*stage=*/0, nullptr, &next, correction, edit);
  inbox = &stage.inbox;
  const v1::StageReport report = stage.Train();
  std::vector<std::string> activations;
  for (const v1::TensorFrame& frame : next.frames) {
    if (frame.kind() == v1::TensorFrame::ACTIVATION) activations.push_back(frame.data());
  }
  return {activations, report.drift_max()};
}

// pipeline.drift_correction changes the updates, not the schedule: the same run twice is
// the same; every other row of the table gives other weights (or, for predict, other
// forward weights) after the first step, and the drift stays within the bound.
TEST(StageRuntimeTest, DriftCorrectionsChangeTheUpdatesNotTheSchedule) {
  const auto [plain, plain_drift] = FirstStageActivations("none");
  const auto [again, again_drift] = FirstStageActivations("none");
  const auto [staleness, staleness_drift] = FirstStageActivations("staleness");
  const auto [stage_lr, stage_lr_drift] = FirstStageActivations("stage-lr");
  ASSERT_EQ(plain.size(), static_cast<size_t>(kMicroBatches));
  EXPECT_EQ(plain, again);
  EXPECT_EQ(plain_drift, 1);
  EXPECT_EQ(staleness_drift, 1);
  EXPECT_EQ(stage_lr_drift, 1);
  // Micro-batches 0 and 1 are forwarded before any step: the same in every run.
  EXPECT_EQ(staleness[0], plain[0]);
  EXPECT_EQ(stage_lr[1], plain[1]);
  EXPECT_NE(staleness.back(), plain.back());
  EXPECT_NE(stage_lr.back(), plain.back());
  EXPECT_NE(staleness.back(), stage_lr.back());
  // predict (forwards on weights extrapolated by the steps their backward will cross) and
  // delay-comp (DC-ASGD's Taylor term on each step's gradients) each change them too.
  const auto [predict, predict_drift] = FirstStageActivations("predict");
  const auto [delay_comp, delay_comp_drift] = FirstStageActivations("delay-comp");
  EXPECT_EQ(predict_drift, 1);
  EXPECT_EQ(delay_comp_drift, 1);
  EXPECT_EQ(delay_comp[1], plain[1]);
  EXPECT_NE(delay_comp.back(), plain.back());
  // predict moves only the forwards that will cross a step once there are moments to move
  // along: micro-batch 2 crosses step 1 (no moments yet: as plain), micro-batch 6 crosses step
  // 3 (its activation differs). The move is undone bit for bit, and micro-batch 6's gradient
  // is first used by step 4, so micro-batch 7, forwarded after step 3, is plain's.
  ASSERT_EQ(predict.size(), plain.size());
  for (size_t m = 0; m < plain.size(); ++m) {
    if (m == 6) {
      EXPECT_NE(predict[m], plain[m]) << "micro-batch " << m;
    } else {
      EXPECT_EQ(predict[m], plain[m]) << "micro-batch " << m;
    }
  }
}

// optimizer.clip_norm scales this stage's gradients down to the norm before AdamW: at a
// norm near eps the updates shrink, so the weights after the first step differ from the
// unclipped run's (and do not with a norm no gradient reaches).
TEST(StageRuntimeTest, ClipNormScalesTheStagesOwnGradients) {
  const auto [plain, plain_drift] = FirstStageActivations("none");
  const auto [clipped, clipped_drift] = FirstStageActivations(
      "none", [](v1::JobSpec& s) { s.mutable_optimizer()->set_clip_norm(1e-9f); });
  const auto [unreached, unreached_drift] = FirstStageActivations(
      "none", [](v1::JobSpec& s) { s.mutable_optimizer()->set_clip_norm(1e9f); });
  ASSERT_EQ(clipped.size(), plain.size());
  EXPECT_EQ(clipped[0], plain[0]);  // before any step
  EXPECT_NE(clipped.back(), plain.back());
  EXPECT_EQ(unreached, plain);
}

// The data of `frame` re-encoded as a hidden-state-shaped tensor of NaN.
std::string NanTensorData(v1::TensorFrame frame) {
  EncodeTensor(torch::full({2, 16, 16}, std::nan("")), &frame);
  return frame.data();
}

// The non-finite guard on stage 0: NaN gradients for the first step's micro-batches (0 and
// 1) make it skip that step (counted in the report and on /metrics); the weights stay
// finite, so every later activation is finite and training goes on to the end.
TEST(StageRuntimeTest, AStepWithNanGradientsIsSkippedAndCounted) {
  Inbox* inbox = nullptr;
  FakeLink next([&inbox](const v1::TensorFrame& frame) {
    if (frame.kind() != v1::TensorFrame::ACTIVATION) return;
    v1::TensorFrame gradient = frame;
    gradient.set_kind(v1::TensorFrame::GRADIENT);
    gradient.set_from_stage(1);
    if (frame.micro_batch_id() < kAccumulation) gradient.set_data(NanTensorData(frame));
    inbox->Push(Inbox::From::kNext, std::move(gradient));
  });
  Stage stage(/*num_stages=*/2, /*stage=*/0, nullptr, &next);
  inbox = &stage.inbox;
  const v1::StageReport report = stage.Train();
  EXPECT_TRUE(report.finished());
  EXPECT_EQ(report.optimizer_steps(), kSteps);
  EXPECT_EQ(report.nonfinite_steps_skipped(), 1);
  EXPECT_EQ(stage.Metric("paci_nonfinite_steps_skipped_total"), 1);
  EXPECT_GT(stage.Metric("paci_gradient_norm"), 0);  // the last step's, finite
  for (const v1::TensorFrame& frame : next.frames) {
    if (frame.kind() != v1::TensorFrame::ACTIVATION) continue;
    EXPECT_TRUE(torch::isfinite(DecodeTensor(frame)).all().item<bool>())
        << "micro-batch " << frame.micro_batch_id();
  }
}

// The last stage fed NaN activations: its loss is NaN at every step, and after
// training.max_nonfinite_steps of them the stage fails naming the field and the steps.
TEST(StageRuntimeTest, ALossNonFiniteForMaxNonfiniteStepsFailsTheStage) {
  Inbox* inbox = nullptr;
  auto nan_activation = [](uint64_t id) {
    v1::TensorFrame frame = Frame(v1::TensorFrame::ACTIVATION, 0, id);
    EncodeTensor(torch::full({2, 16, 16}, std::nan("")), &frame);
    return frame;
  };
  FakeLink previous([](const v1::TensorFrame&) {});
  Stage stage(/*num_stages=*/2, /*stage=*/1, &previous, nullptr, "none",
              [](v1::JobSpec& s) { s.mutable_training()->set_max_nonfinite_steps(2); });
  inbox = &stage.inbox;
  for (int id = 0; id < kMicroBatches; ++id) {
    ASSERT_TRUE(inbox->Push(Inbox::From::kPrevious, nan_activation(id)));
  }
  absl::Status status;
  const v1::StageReport report = stage.Train(&status);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(std::string(status.message()),
              ::testing::HasSubstr("training.max_nonfinite_steps: the training loss was NaN or "
                                   "Inf for 2 optimizer steps in a row (steps 1 to 2)"));
  EXPECT_EQ(report.nonfinite_steps_skipped(), 2);
}

TEST(StageRuntimeTest, LastStageComputesTheLossFromAFakeFirstStage) {
  // The first stage: activations 0-3, the step-2 evaluation once gradient 3
  // is back (the pipe is drained), activations 4-7, and after gradient 7 the
  // final evaluation and the shutdown.
  Inbox* inbox = nullptr;
  auto push = [&inbox](v1::TensorFrame frame) {
    ASSERT_TRUE(inbox->Push(Inbox::From::kPrevious, std::move(frame)));
  };
  auto evaluate = [&push](int64_t step) {
    for (int j = 0; j < kEvalBatches; ++j) {
      push(Frame(v1::TensorFrame::EVAL_ACTIVATION, 0, j, step, /*tensor=*/true));
    }
  };
  FakeLink previous([&](const v1::TensorFrame& frame) {
    if (frame.micro_batch_id() == 3) {
      evaluate(2);
      for (int id = 4; id < kMicroBatches; ++id) {
        push(Frame(v1::TensorFrame::ACTIVATION, 0, id, 0, /*tensor=*/true));
      }
    } else if (frame.micro_batch_id() == kMicroBatches - 1) {
      evaluate(kSteps);
      push(Frame(v1::TensorFrame::SHUTDOWN, 0, 0));
    }
  });
  Stage stage(/*num_stages=*/2, /*stage=*/1, &previous, nullptr);
  inbox = &stage.inbox;
  for (int id = 0; id < 4; ++id) push(Frame(v1::TensorFrame::ACTIVATION, 0, id, 0, true));
  const v1::StageReport report = stage.Train();

  EXPECT_THAT(previous.Ids(v1::TensorFrame::GRADIENT), ElementsAre(0, 1, 2, 3, 4, 5, 6, 7));
  EXPECT_EQ(previous.frames.size(), static_cast<size_t>(kMicroBatches));
  EXPECT_EQ(previous.closes, 1);
  EXPECT_TRUE(report.finished());
  EXPECT_EQ(report.optimizer_steps(), kSteps);
  EXPECT_EQ(report.forward_micro_batches(), kMicroBatches);
  EXPECT_THAT(Steps(report.train_loss()), ElementsAre(1, 2, 3, 4));
  EXPECT_THAT(Steps(report.validation_loss()), ElementsAre(2, 4));
}

// A stage whose estimated memory exceeds what the worker has is refused
// before anything is built, with the estimate and what to change.
TEST(StageModelMemoryTest, AVocabularyPastTheLimitIsRefusedWithTheEstimate) {
  const v1::JobSpec small = Spec(2);
  const v1::JobSpec large = Spec(2, "none", [](v1::JobSpec& spec) {
    spec.mutable_model()->set_vocab_size(524288);
    spec.mutable_model()->set_d_model(2048);
    spec.mutable_model()->set_num_heads(8);
    spec.mutable_model()->set_num_kv_heads(8);
  });
  const MemoryLimit limit{uint64_t{8} << 30, "its cgroup's memory limit"};
  EXPECT_TRUE(StageModel::CheckMemory(small, 1, Precision::kFp32, limit).ok());
  const absl::Status refused = StageModel::CheckMemory(large, 1, Precision::kFp32, limit);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  for (const char* part : {"stage 1", "head", "the head's logits", "weights, gradients and AdamW",
                           "more than the 8.00 GiB it has (its cgroup's memory limit)",
                           "model.vocab_size (524288)"}) {
    EXPECT_NE(refused.message().find(part), std::string::npos) << part << " in " << refused;
  }
  // No limit known: nothing is checked.
  EXPECT_TRUE(StageModel::CheckMemory(large, 1, Precision::kFp32, MemoryLimit{}).ok());
}

// Create checks against the memory this process has: a model larger than any
// machine (a million-word head of width 65,536: 1 PB with AdamW) is refused
// before it allocates, not killed for memory halfway through.
TEST(StageModelMemoryTest, CreateRefusesAModelLargerThanTheMachineBeforeAllocating) {
  const v1::JobSpec huge = Spec(1, "none", [](v1::JobSpec& spec) {
    spec.mutable_model()->set_vocab_size(1000000);
    spec.mutable_model()->set_d_model(65536);
    spec.mutable_model()->set_num_heads(8);
    spec.mutable_model()->set_num_kv_heads(8);
  });
  absl::StatusOr<std::unique_ptr<StageModel>> model = StageModel::Create(huge, 0, 0);
  ASSERT_FALSE(model.ok());
  EXPECT_EQ(model.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(model.status().message().find("model.vocab_size (1000000)"), std::string::npos)
      << model.status();
  EXPECT_NE(model.status().message().find(MemoryLimitOfThisProcess().source), std::string::npos);
}

// The step's gradient norm is taken in double a piece at a time: over a
// gradient of several pieces it is the norm of all of it, and gradients whose
// squares overflow float32 still give a finite norm (and a step, clipped).
TEST(StageModelTest, TheGradientNormIsTheWholeNormInDoubleOverGradientsOfManyPieces) {
  const v1::JobSpec spec = Spec(1, "none", [](v1::JobSpec& s) {
    s.mutable_model()->set_vocab_size(40000);  // the embedding: 640,000 elements, 3 pieces
    s.mutable_optimizer()->set_clip_norm(1.0f);
  });
  for (const double value : {0.5, 1e30}) {
    SCOPED_TRACE(value);
    absl::StatusOr<std::unique_ptr<StageModel>> created = StageModel::Create(spec, 0, 0);
    ASSERT_TRUE(created.ok()) << created.status();
    StageModel& model = **created;
    int64_t elements = 0;
    for (auto& item : model.module()->named_parameters()) {
      item.value().mutable_grad() = torch::full_like(item.value(), value);
      elements += item.value().numel();
    }
    const StageModel::StepOutcome outcome = model.Step(1);
    EXPECT_FALSE(outcome.skipped);
    const double stored = static_cast<float>(value);  // what each float32 element holds
    EXPECT_NEAR(outcome.gradient_norm / (stored * std::sqrt(static_cast<double>(elements))), 1.0,
                1e-9);
  }
}

// Weight prediction moves the forward's pieces one at a time (the piece before
// goes back as the next moves), and of each only what the forward reads: the
// forward is bit for bit the one on every parameter moved at once (the whole
// token embedding included), the split head's rows on the stage before the
// last never move, and everything is back once the guard ends.
TEST(StageModelPredictionTest, ThePiecesMoveOneAtATimeAndTheForwardIsTheOneOnEveryWeightMoved) {
  const v1::JobSpec spec = Spec(2, "predict", [](v1::JobSpec& s) {
    s.mutable_pipeline()->set_partition("3/40");
    s.mutable_runtime()->set_precision("fp32");
  });
  absl::StatusOr<std::unique_ptr<StageModel>> created = StageModel::Create(spec, 0, 0);
  ASSERT_TRUE(created.ok()) << created.status();
  StageModel& model = **created;
  GptStage& module = model.module();
  module->eval();  // no dropout: two forwards comparable
  torch::manual_seed(3);
  const torch::Tensor tokens = torch::randint(20, {2, 16});  // rows 0..19 of 80 at most
  module(tokens).pow(2).mean().backward();
  for (auto& item : module->named_parameters()) {
    if (item.key() == kHeadWeight) item.value().mutable_grad() = torch::randn_like(item.value());
  }
  ASSERT_FALSE(model.Step(1).skipped);
  std::map<std::string, torch::Tensor> before;
  for (const auto& item : module->named_parameters()) before[item.key()] = item.value().detach().clone();
  const auto unchanged = [&](const std::string& name) {
    return torch::equal(module->named_parameters()[name], before[name]);
  };
  const auto all_unchanged = [&] {
    for (const auto& [name, tensor] : before) EXPECT_TRUE(unchanged(name)) << name;
  };

  // The reference: every parameter but the head's rows moved at once, one step
  // ahead at the next step's rate (PredictWeights(1, 1): LearningRateAt(.., 1)).
  LrScheduleOptions lr;
  lr.peak_lr = spec.optimizer().lr();
  lr.total_steps = spec.training().steps();
  lr.warmup_fraction = spec.optimizer().warmup_fraction();
  lr.min_lr_ratio = spec.optimizer().min_lr_ratio();
  std::vector<std::string> all_but_head;
  for (const auto& [name, tensor] : before) {
    if (name != kHeadWeight) all_but_head.push_back(name);
  }
  AdamW::Reads everything;
  everything.only = &all_but_head;
  model.optimizer().Extrapolate(LearningRateAt(lr, 1), everything);
  const torch::Tensor reference = module(tokens).detach();
  model.optimizer().Retract();
  all_unchanged();
  EXPECT_FALSE(torch::equal(reference, module(tokens).detach()));  // the move changed it

  {
    const StageModel::Prediction prediction = model.PredictWeights(1, 1, tokens);
    all_unchanged();  // nothing moves before the forward comes to it
    EXPECT_TRUE(torch::equal(module(tokens).detach(), reference));
    // After the forward only its last piece (block 0) is still moved; the
    // embedding went back as the block moved, and the head's rows never moved.
    EXPECT_FALSE(unchanged("h0.attn.qkv.weight"));
    EXPECT_FALSE(unchanged("h0.fc.weight"));
    EXPECT_TRUE(unchanged(kTokenEmbeddingWeight));
    EXPECT_TRUE(unchanged(kHeadWeight));
    // A second forward under the same guard predicts the same way.
    EXPECT_TRUE(torch::equal(module(tokens).detach(), reference));
  }
  all_unchanged();
  EXPECT_FALSE(torch::equal(module(tokens).detach(), reference));  // the hook is gone
}

}  // namespace
}  // namespace paci
