#include "tools/chrome_trace.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "gmock/gmock.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"

namespace paci {
namespace {

using google::protobuf::Struct;
using google::protobuf::Value;

constexpr int64_t kT0 = 1'700'000'000'000'000;

v1::Span MakeSpan(v1::Span::Kind kind, int64_t start, int64_t end, std::optional<uint64_t> id,
                  std::optional<int64_t> step = std::nullopt) {
  v1::Span span;
  span.set_kind(kind);
  span.set_start_unix_micros(kT0 + start);
  span.set_end_unix_micros(kT0 + end);
  if (id) span.set_micro_batch_id(*id);
  if (step) span.set_step(*step);
  return span;
}

// Two stages of a PACI run's first micro-batches, as the runtime records them.
std::vector<std::vector<v1::Span>> TwoStages() {
  return {
      {MakeSpan(v1::Span::FORWARD, 100, 300, 0), MakeSpan(v1::Span::SEND, 300, 320, 0),
       MakeSpan(v1::Span::FORWARD, 320, 500, 1), MakeSpan(v1::Span::SEND, 500, 510, 1),
       MakeSpan(v1::Span::IDLE, 510, 900, std::nullopt),
       MakeSpan(v1::Span::BACKWARD, 900, 1300, 0),
       MakeSpan(v1::Span::OPTIMIZER_STEP, 1300, 1350, std::nullopt, 1)},
      {MakeSpan(v1::Span::IDLE, 150, 340, std::nullopt), MakeSpan(v1::Span::FORWARD, 340, 520, 0),
       MakeSpan(v1::Span::BACKWARD, 520, 880, 0), MakeSpan(v1::Span::SEND, 880, 890, 0),
       MakeSpan(v1::Span::EVAL, 890, 990, std::nullopt, 10)},
  };
}

Struct Parse(const std::string& json) {
  Struct root;
  const auto status = google::protobuf::util::JsonStringToMessage(json, &root);
  EXPECT_TRUE(status.ok()) << status.ToString() << "\n" << json;
  return root;
}

const Value& Field(const Struct& s, const std::string& key) {
  static const Value kNull;
  auto it = s.fields().find(key);
  return it == s.fields().end() ? kNull : it->second;
}

TEST(ChromeTraceTest, IsJsonWithWellFormedNonOverlappingCompleteEventsPerStage) {
  const Struct root = Parse(ChromeTraceJson("kjv-small", TwoStages(), {0, 3}));
  ASSERT_EQ(Field(root, "traceEvents").kind_case(), Value::kListValue);
  std::map<int, std::vector<std::pair<double, double>>> spans_by_tid;  // ts, dur
  std::map<int, std::string> thread_names;
  std::map<std::string, int> names;
  double earliest = 1e18;
  for (const Value& event_value : Field(root, "traceEvents").list_value().values()) {
    ASSERT_EQ(event_value.kind_case(), Value::kStructValue);
    const Struct& event = event_value.struct_value();
    const std::string ph = Field(event, "ph").string_value();
    EXPECT_EQ(Field(event, "pid").number_value(), 1);
    ASSERT_EQ(Field(event, "tid").kind_case(), Value::kNumberValue);
    const int tid = static_cast<int>(Field(event, "tid").number_value());
    if (ph == "M") {
      if (Field(event, "name").string_value() == "thread_name") {
        thread_names[tid] = Field(Field(event, "args").struct_value(), "name").string_value();
      }
      continue;
    }
    ASSERT_EQ(ph, "X");
    ASSERT_EQ(Field(event, "ts").kind_case(), Value::kNumberValue);
    ASSERT_EQ(Field(event, "dur").kind_case(), Value::kNumberValue);
    EXPECT_GE(Field(event, "dur").number_value(), 0);
    EXPECT_EQ(Field(event, "args").kind_case(), Value::kStructValue);
    ++names[Field(event, "name").string_value()];
    earliest = std::min(earliest, Field(event, "ts").number_value());
    spans_by_tid[tid].push_back({Field(event, "ts").number_value(), Field(event, "dur").number_value()});
  }
  EXPECT_EQ(thread_names, (std::map<int, std::string>{{0, "stage 0"}, {1, "stage 1"}}));
  EXPECT_EQ(earliest, 0) << "ts counts from the earliest span of any stage";
  EXPECT_EQ(names["forward"], 3);
  EXPECT_EQ(names["backward"], 2);
  EXPECT_EQ(names["send"], 3);
  EXPECT_EQ(names["idle"], 2);
  EXPECT_EQ(names["optimizer_step"], 1);
  EXPECT_EQ(names["eval"], 1);
  ASSERT_EQ(spans_by_tid.size(), 2u);
  for (auto& [tid, spans] : spans_by_tid) {
    std::sort(spans.begin(), spans.end());
    for (size_t i = 1; i < spans.size(); ++i) {
      EXPECT_LE(spans[i - 1].first + spans[i - 1].second, spans[i].first) << "tid " << tid;
    }
  }
  const Struct& other = Field(root, "otherData").struct_value();
  EXPECT_EQ(Field(other, "job").string_value(), "kjv-small");
  EXPECT_EQ(Field(other, "origin_unix_micros").number_value(), static_cast<double>(kT0 + 100));
  ASSERT_EQ(Field(other, "spans_dropped").list_value().values_size(), 2);
  EXPECT_EQ(Field(other, "spans_dropped").list_value().values(1).number_value(), 3);
}

TEST(ChromeTraceTest, ArgsCarryTheMicroBatchOrTheStep) {
  const std::string json = ChromeTraceJson("j", TwoStages());
  EXPECT_THAT(json, ::testing::HasSubstr(
                        "{\"name\": \"backward\", \"cat\": \"backward\", \"ph\": \"X\", \"pid\": 1, "
                        "\"tid\": 0, \"ts\": 800, \"dur\": 400, \"args\": {\"micro_batch\": 0}}"));
  EXPECT_THAT(json, ::testing::HasSubstr("\"name\": \"optimizer_step\""));
  EXPECT_THAT(json, ::testing::HasSubstr("\"args\": {\"step\": 1}"));
}

TEST(ChromeTraceTest, ReplicasAreNamedThreadsAndTheirAllReducesSpans) {
  std::vector<std::vector<v1::Span>> spans = TwoStages();
  spans[1].push_back(MakeSpan(v1::Span::ALL_REDUCE, 1400, 1450, std::nullopt, 1));
  const std::string json =
      ChromeTraceJson("j", spans, {}, {"stage 0 replica 0", "stage 0 replica 1"});
  EXPECT_THAT(json, ::testing::HasSubstr("\"tid\": 1, \"args\": {\"name\": \"stage 0 replica 1\"}"));
  EXPECT_THAT(json, ::testing::HasSubstr("{\"name\": \"all_reduce\", \"cat\": \"all_reduce\""));
  Parse(json);  // still valid JSON
}

TEST(ChromeTraceTest, EmptyRunAndOddJobNamesStillGiveValidJson) {
  const Struct root = Parse(ChromeTraceJson("a \"quoted\"\n\\name", {{}, {}}));
  // One process_name and two metadata events per stage, no spans.
  EXPECT_EQ(Field(root, "traceEvents").list_value().values_size(), 5);
}

TEST(ChromeTraceTest, WriteCreatesTheFolderAndRefusesAnUnwritablePath) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / "chrome-trace-test" / "nested";
  std::filesystem::remove_all(dir.parent_path());
  ASSERT_TRUE(WriteChromeTrace((dir / "t.json").string(), "j", TwoStages()).ok());
  std::ifstream file(dir / "t.json");
  std::stringstream text;
  text << file.rdbuf();
  Parse(text.str());
  const absl::Status bad = WriteChromeTrace((dir / "t.json" / "x.json").string(), "j", TwoStages());
  EXPECT_EQ(bad.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(bad.message()), ::testing::HasSubstr("x.json"));
}

}  // namespace
}  // namespace paci
