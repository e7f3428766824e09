// The TrainingJob CRD (generated: the +crd: markers of job.proto) repeats the
// numeric bounds that ValidateJobSpec enforces, so that kubectl refuses a bad
// spec at once instead of the operator later. These tests hold the two together: every bound the CRD declares on
// spec is probed at the bound and just past it through the coordinator's own
// parse, defaults and validation, and where the CRD declares none the
// coordinator must take the largest (or smallest) value the field can hold.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/job_spec.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "yaml-cpp/yaml.h"

namespace paci {
namespace {

using ::google::protobuf::Descriptor;
using ::google::protobuf::FieldDescriptor;
using ::nlohmann::json;
using ::testing::HasSubstr;

const char kCrd[] = PACI_SOURCE_DIR "/deploy/crd/paci.dev_trainingjobs.yaml";

// Subtrees of the CRD's spec that the operator reads itself (the worker pods'
// template, the dataset initializer's pod, the parity check's runs), not
// JobSpec fields the coordinator checks.
const std::set<std::string> kOperatorOnly = {"worker", "initializer", "parity"};

// A spec every probe starts from: the CRD's required fields, small (as
// job_spec_test.cc's minimal spec), in the CRD's lowerCamelCase. The name is
// what the operator adds.
constexpr char kBaseSpec[] = R"json({
  "name": "crd-bounds",
  "model": {"vocabSize": 96, "numLayers": 4, "dModel": 128, "numHeads": 4, "seqLen": 64},
  "pipeline": {"numStages": 2, "accumulation": 2, "microBatchSize": 8},
  "optimizer": {"lr": 3e-3},
  "training": {"steps": 300},
  "data": {"corpusPath": "corpus.txt"}
})json";

// The few fields the base spec does not serve as it is: at one of their
// bounds a cross-field rule of ValidateJobSpec would refuse the spec, so the
// set-up moves the other field (a JSON merge patch onto the base spec) to keep
// the value at the bound valid and the refusal past it the field's own.
struct FieldSetUp {
  const char* path;   // as the CRD spells it
  const char* patch;  // merged into the base spec (RFC 7386: null removes)
  // With no CRD maximum: the largest value the coordinator takes, when a
  // cross-field rule keeps it below what the field's type holds.
  std::optional<int64_t> largest;
  // The patch at and past the maximum, when it differs from `patch`.
  const char* patch_at_maximum = nullptr;
};

// An elastic range around the base spec's 2 stages, and the checkpoint it needs.
constexpr char kElastic[] = R"({"pipeline": {"elastic": {"minStages": 1, "maxStages": 2}},
                                 "checkpoint": {"directory": "ckpt"}})";
// Its replicas at their maximum: 256 of them, the range's one replica count
// (a global batch fits every count of a range only as their multiple).
constexpr char kElasticReplicas[] = R"({
  "pipeline": {"dataParallel": 256,
               "elastic": {"minStages": 1, "maxStages": 2, "minReplicas": 256, "maxReplicas": 256}},
  "checkpoint": {"directory": "ckpt"}})";

const FieldSetUp kSetUps[] = {
    // At its minimum of 1 the base's 2 stages would need more layers.
    {"model.numLayers", R"({"pipeline": {"numStages": 1}})", std::nullopt},
    // At its maximum of 64 the stages need 64 layers.
    {"pipeline.numStages", R"({"model": {"numLayers": 64}})", std::nullopt},
    // A warm-up is at most the run: at its maximum, the longest run.
    {"pipeline.warmupSteps", R"({"training": {"steps": 1000000000}})", std::nullopt},
    // A drift limit of 0 with schedule paci needs a single stage.
    {"pipeline.maxDrift", R"({"pipeline": {"numStages": 1}})", std::nullopt},
    // Validation shards other than 0 need a dataset, not a corpus.
    {"data.validationShards", R"({"data": {"corpusPath": null, "dataset": "dataset"}})",
     std::nullopt},
    // No bound of its own above: a divisor of dModel, whose maximum is 65536.
    {"model.numHeads", R"({"model": {"dModel": 65536}})", 65536},
    // Grouped-query attention is llama's, and the heads a divisor of num_heads
    // (at most 32768 heads there: rotary positions need an even head size).
    {"model.numKvHeads",
     R"({"model": {"architecture": "llama", "dModel": 65536, "numHeads": 32768}})", 32768},
    // The global batch gives the accumulation (at most 4096) with micro-batches of one
    // sequence at its minimum, of 65536 on 4 replicas at its maximum of 2^30.
    {"pipeline.globalBatch", R"({"pipeline": {"accumulation": null, "microBatchSize": 1, "globalBatch": 2}})", std::nullopt,
     R"({"pipeline": {"accumulation": null, "microBatchSize": 65536, "dataParallel": 4,
                      "globalBatch": 262144}})"},
    // pipeline.elastic: a range that holds the spec's own shape, and a checkpoint
    // to resume from; at their maxima the spec's shape is the range's end.
    {"pipeline.elastic.minStages", kElastic, std::nullopt,
     R"({"model": {"numLayers": 64},
         "pipeline": {"numStages": 64, "elastic": {"minStages": 1, "maxStages": 64}},
         "checkpoint": {"directory": "ckpt"}})"},
    {"pipeline.elastic.maxStages",
     R"({"pipeline": {"numStages": 1, "elastic": {"minStages": 1, "maxStages": 1}},
         "checkpoint": {"directory": "ckpt"}})",
     std::nullopt,
     R"({"model": {"numLayers": 64}, "pipeline": {"elastic": {"minStages": 1, "maxStages": 64}},
         "checkpoint": {"directory": "ckpt"}})"},
    {"pipeline.elastic.minReplicas", kElastic, std::nullopt,
     kElasticReplicas},
    {"pipeline.elastic.maxReplicas", kElastic, std::nullopt,
     kElasticReplicas},
    {"pipeline.elastic.graceSeconds", kElastic, std::nullopt},
    {"pipeline.elastic.minResizeIntervalSeconds", kElastic, std::nullopt},
};

const FieldSetUp* FieldSetUpOf(const std::string& path) {
  for (const FieldSetUp& set_up : kSetUps) {
    if (path == set_up.path) return &set_up;
  }
  return nullptr;
}

// One side of a property's range, as the CRD declares it.
struct Bound {
  double value;
  bool exclusive;  // OpenAPI v3.0's boolean exclusiveMinimum / exclusiveMaximum
};

// An integer or number property of the CRD's spec.
struct CrdNumber {
  std::string path;  // "pipeline.numStages"
  bool integer = false;
  std::optional<Bound> minimum;
  std::optional<Bound> maximum;
};

std::optional<Bound> BoundOf(const YAML::Node& property, const char* key,
                             const char* exclusive_key) {
  const YAML::Node value = property[key];
  if (!value) return std::nullopt;
  const YAML::Node exclusive = property[exclusive_key];
  return Bound{value.as<double>(), exclusive && exclusive.as<bool>()};
}

bool IsNumeric(const YAML::Node& property) {
  const YAML::Node type = property["type"];
  return type && (type.as<std::string>() == "integer" || type.as<std::string>() == "number");
}

void CollectNumbers(const YAML::Node& schema, const std::string& prefix,
                    std::vector<CrdNumber>* out) {
  const YAML::Node properties = schema["properties"];
  if (!properties || !properties.IsMap()) return;  // a missing key's node throws on IsMap
  for (const auto& entry : properties) {
    const std::string path = absl::StrCat(prefix, prefix.empty() ? "" : ".",
                                          entry.first.as<std::string>());
    const YAML::Node& property = entry.second;
    if (kOperatorOnly.count(path) > 0) continue;
    if (IsNumeric(property)) {
      out->push_back({path, property["type"].as<std::string>() == "integer",
                      BoundOf(property, "minimum", "exclusiveMinimum"),
                      BoundOf(property, "maximum", "exclusiveMaximum")});
    } else if (property["items"] && IsNumeric(property["items"])) {
      ADD_FAILURE() << path << ": a list of numbers, which these tests do not probe yet";
    } else {
      CollectNumbers(property, path, out);
    }
  }
}

// Every integer and number property of spec.versions[0]'s spec, read once.
const std::vector<CrdNumber>& CrdNumbers() {
  static const std::vector<CrdNumber>* const numbers = [] {
    auto* numbers = new std::vector<CrdNumber>;
    try {
      const YAML::Node crd = YAML::LoadFile(kCrd);
      CollectNumbers(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"],
                     "", numbers);
    } catch (const YAML::Exception& e) {
      ADD_FAILURE() << kCrd << ": " << e.what();
    }
    return numbers;
  }();
  return *numbers;
}

// The JobSpec field a CRD path names (the proto3 JSON names are the CRD's),
// and its path in the field names that ValidateJobSpec's messages use.
struct ProtoField {
  const FieldDescriptor* field = nullptr;  // nullptr: no such field
  std::string path;                        // "pipeline.num_stages"
};

ProtoField FindProtoField(const std::string& crd_path) {
  const Descriptor* message = v1::JobSpec::descriptor();
  ProtoField found;
  std::vector<std::string> names;
  for (absl::string_view part : absl::StrSplit(crd_path, '.')) {
    found.field = nullptr;
    for (int i = 0; message != nullptr && i < message->field_count(); ++i) {
      if (message->field(i)->json_name() == part) found.field = message->field(i);
    }
    if (found.field == nullptr) return {};
    names.push_back(found.field->name());
    message = found.field->message_type();
  }
  found.path = absl::StrJoin(names, ".");
  return found;
}

// What the coordinator says of `spec`: parsed as a submitted spec is (unknown
// keys refused), defaults applied, validated.
absl::Status Check(const json& spec) {
  absl::StatusOr<v1::JobSpec> parsed = ParseJobSpecYaml(spec.dump());
  if (!parsed.ok()) return parsed.status();
  ApplyJobSpecDefaults(&*parsed);
  return ValidateJobSpec(*parsed);
}

// The base spec, set up for `path` (at or past its maximum: `at_maximum`), with `value`
// at `path`.
json SpecWith(const std::string& path, const json& value, bool at_maximum) {
  json spec = json::parse(kBaseSpec);
  if (const FieldSetUp* set_up = FieldSetUpOf(path)) {
    spec.merge_patch(json::parse(at_maximum && set_up->patch_at_maximum != nullptr
                                     ? set_up->patch_at_maximum
                                     : set_up->patch));
  }
  spec[json::json_pointer("/" + absl::StrJoin(absl::StrSplit(path, '.'), "/"))] = value;
  return spec;
}

// `bound` itself, as the property's JSON type.
json At(const CrdNumber& number, double bound) {
  if (number.integer) return json(static_cast<int64_t>(bound));
  return json(bound);
}

// A value just past `bound` in `direction` (+1 up, -1 down): the next integer,
// or for a number 0.1% of the bound (at least 0.001), which float fields still
// tell apart from it.
json Beyond(const CrdNumber& number, double bound, int direction) {
  if (number.integer) return json(static_cast<int64_t>(bound) + direction);
  return json(bound + direction * std::max(1e-3, std::abs(bound) * 1e-3));
}

// One side of a property's range: the minimum looks down, the maximum up.
struct Side {
  const char* name;
  std::optional<Bound> bound;
  int direction;
};

std::vector<Side> SidesOf(const CrdNumber& number) {
  return {{"minimum", number.minimum, -1}, {"maximum", number.maximum, +1}};
}

// The value a side of the range takes (the bound, or just inside an
// exclusive one) and the one it refuses (just past, or an exclusive bound).
json Taken(const CrdNumber& number, const Side& side) {
  return side.bound->exclusive ? Beyond(number, side.bound->value, -side.direction)
                               : At(number, side.bound->value);
}

json Refused(const CrdNumber& number, const Side& side) {
  return side.bound->exclusive ? At(number, side.bound->value)
                               : Beyond(number, side.bound->value, side.direction);
}

// Where the CRD declares no bound: the most the field's type holds in
// `direction` (a CRD integer is an int64, so no more than that).
json Extreme(const FieldDescriptor& field, int direction) {
  const bool up = direction > 0;
  switch (field.cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return up ? std::numeric_limits<int32_t>::max() : std::numeric_limits<int32_t>::min();
    case FieldDescriptor::CPPTYPE_INT64:
      return up ? std::numeric_limits<int64_t>::max() : std::numeric_limits<int64_t>::min();
    case FieldDescriptor::CPPTYPE_UINT32:
    case FieldDescriptor::CPPTYPE_UINT64:
      return up ? std::numeric_limits<int64_t>::max() : 0;
    case FieldDescriptor::CPPTYPE_FLOAT:
      return up ? 1e38 : -1e38;
    default:
      return up ? 1e300 : -1e300;
  }
}

std::string Describe(const CrdNumber& number, const Side& side, const json& value) {
  return absl::StrCat(number.path, " = ", value.dump(), " (CRD ", side.name,
                      side.bound ? absl::StrCat(" ", At(number, side.bound->value).dump(),
                                                side.bound->exclusive ? ", exclusive" : "")
                                 : ": none",
                      ")");
}

size_t CountBounds() {
  size_t bounds = 0;
  for (const CrdNumber& number : CrdNumbers()) {
    bounds += number.minimum.has_value() + number.maximum.has_value();
  }
  return bounds;
}

TEST(JobSpecCrdTest, WalkFindsTheBoundsOfEverySection) {
  // 34 properties and 58 bounds when written: a walk that lost its way (or
  // a CRD that lost a section) finds far fewer.
  EXPECT_GE(CrdNumbers().size(), 30u);
  EXPECT_GE(CountBounds(), 55u);
  std::set<std::string> sections;
  for (const CrdNumber& number : CrdNumbers()) {
    sections.insert(number.path.substr(0, number.path.find('.')));
  }
  EXPECT_EQ(sections, (std::set<std::string>{"checkpoint", "data", "model", "optimizer",
                                             "pipeline", "runPolicy", "runtime", "training"}));
}

TEST(JobSpecCrdTest, EveryNumericCrdFieldIsANumericJobSpecField) {
  for (const CrdNumber& number : CrdNumbers()) {
    const ProtoField proto = FindProtoField(number.path);
    ASSERT_NE(proto.field, nullptr) << number.path << ": not a JobSpec field (a typo?)";
    const FieldDescriptor::CppType type = proto.field->cpp_type();
    const bool integer = type == FieldDescriptor::CPPTYPE_INT32 ||
                         type == FieldDescriptor::CPPTYPE_INT64 ||
                         type == FieldDescriptor::CPPTYPE_UINT32 ||
                         type == FieldDescriptor::CPPTYPE_UINT64;
    const bool real =
        type == FieldDescriptor::CPPTYPE_FLOAT || type == FieldDescriptor::CPPTYPE_DOUBLE;
    EXPECT_TRUE(number.integer ? integer : real)
        << number.path << ": the CRD's " << (number.integer ? "integer" : "number") << " is a "
        << proto.field->cpp_type_name() << " in job.proto";
    EXPECT_FALSE(proto.field->is_repeated()) << number.path;
  }
}

// job.proto's numeric fields under `message`, as CRD paths.
void CollectProtoNumbers(const Descriptor& message, const std::string& prefix,
                         std::vector<std::string>* out) {
  for (int i = 0; i < message.field_count(); ++i) {
    const FieldDescriptor& field = *message.field(i);
    const std::string path = absl::StrCat(prefix, prefix.empty() ? "" : ".", field.json_name());
    if (field.message_type() != nullptr && !field.is_map()) {
      CollectProtoNumbers(*field.message_type(), path, out);
    } else if (!field.is_repeated() && field.cpp_type() != FieldDescriptor::CPPTYPE_STRING &&
               field.cpp_type() != FieldDescriptor::CPPTYPE_BOOL &&
               field.cpp_type() != FieldDescriptor::CPPTYPE_ENUM) {
      out->push_back(path);
    }
  }
}

TEST(JobSpecCrdTest, EveryNumericJobSpecFieldIsInTheCrd) {
  std::vector<std::string> proto_numbers;
  CollectProtoNumbers(*v1::JobSpec::descriptor(), "", &proto_numbers);
  std::set<std::string> crd_paths;
  for (const CrdNumber& number : CrdNumbers()) crd_paths.insert(number.path);
  for (const std::string& path : proto_numbers) {
    EXPECT_EQ(crd_paths.count(path), 1u) << path << ": in job.proto, not a number in the CRD";
  }
}

TEST(JobSpecCrdTest, BaseSpecIsValidWithEverySetUp) {
  const absl::Status base = Check(json::parse(kBaseSpec));
  EXPECT_TRUE(base.ok()) << base;
  for (const FieldSetUp& set_up : kSetUps) {
    json spec = json::parse(kBaseSpec);
    spec.merge_patch(json::parse(set_up.patch));
    const absl::Status status = Check(spec);
    EXPECT_TRUE(status.ok()) << set_up.path << ": " << status;
    if (set_up.patch_at_maximum != nullptr) {
      json at_maximum = json::parse(kBaseSpec);
      at_maximum.merge_patch(json::parse(set_up.patch_at_maximum));
      EXPECT_TRUE(Check(at_maximum).ok()) << set_up.path << ": " << Check(at_maximum);
    }
    EXPECT_NE(FindProtoField(set_up.path).field, nullptr) << set_up.path << ": a stale set-up";
  }
}

TEST(JobSpecCrdTest, ValueAtEveryCrdBoundIsAccepted) {
  for (const CrdNumber& number : CrdNumbers()) {
    for (const Side& side : SidesOf(number)) {
      if (!side.bound) continue;
      const json value = Taken(number, side);
      const absl::Status status = Check(SpecWith(number.path, value, side.direction > 0));
      EXPECT_TRUE(status.ok()) << Describe(number, side, value) << ": " << status;
    }
  }
}

TEST(JobSpecCrdTest, ValueJustPastEveryCrdBoundIsRefusedNamingTheField) {
  for (const CrdNumber& number : CrdNumbers()) {
    const std::string field = FindProtoField(number.path).path;
    for (const Side& side : SidesOf(number)) {
      if (!side.bound) continue;
      const json value = Refused(number, side);
      const absl::Status status = Check(SpecWith(number.path, value, side.direction > 0));
      EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument)
          << Describe(number, side, value) << ": " << status;
      // The validator's "model.seq_len: must be ..." or, for what the parser
      // refuses (a negative unsigned), "spec: (model.init_seed): invalid value".
      EXPECT_THAT(std::string(status.message()),
                  testing::AnyOf(HasSubstr(field + ": "), HasSubstr("(" + field + ")")))
          << Describe(number, side, value);
    }
  }
}

TEST(JobSpecCrdTest, ValueTheCrdLeavesUnboundedIsAccepted) {
  for (const CrdNumber& number : CrdNumbers()) {
    const ProtoField proto = FindProtoField(number.path);
    if (proto.field == nullptr) continue;  // EveryNumericCrdFieldIsANumericJobSpecField says so
    const FieldSetUp* set_up = FieldSetUpOf(number.path);
    for (const Side& side : SidesOf(number)) {
      if (side.bound) continue;
      const json value = side.direction > 0 && set_up != nullptr && set_up->largest
                             ? json(*set_up->largest)
                             : Extreme(*proto.field, side.direction);
      const absl::Status status = Check(SpecWith(number.path, value, side.direction > 0));
      EXPECT_TRUE(status.ok()) << Describe(number, side, value)
                               << ": the coordinator has a bound the CRD lacks: " << status;
    }
  }
}

}  // namespace
}  // namespace paci
