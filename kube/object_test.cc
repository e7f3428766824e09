#include "kube/object.h"

#include <gtest/gtest.h>

namespace paci::kube {
namespace {

using nlohmann::json;

TEST(ObjectTest, FieldsNeverThrow) {
  const json object = {{"name", "kjv"}, {"count", 3}, {"gone", nullptr}, {"list", {1, 2}}};
  EXPECT_EQ(StringField(object, "name"), "kjv");
  EXPECT_EQ(StringField(object, "count"), "");  // not a string
  EXPECT_EQ(StringField(object, "missing"), "");
  EXPECT_EQ(Field(object, "gone"), json::object());  // null reads as empty
  EXPECT_EQ(Field(json("not an object"), "name"), json::object());
  EXPECT_EQ(IntField(object, "count", 7), 3);
  EXPECT_EQ(IntField(object, "name", 7), 7);
  EXPECT_EQ(IntField(object, "missing", 7), 7);
}

TEST(ObjectTest, OptionalNumbersAreAbsentWhereNoNumberIs) {
  const json object = {{"n", 2.5}, {"i", 7}, {"f", 1234.6}, {"s", "ten"}, {"null", nullptr}};
  EXPECT_EQ(NumberField(object, "n"), 2.5);
  EXPECT_EQ(NumberField(object, "i"), 7.0);
  EXPECT_EQ(OptionalIntField(object, "i"), 7);
  EXPECT_EQ(OptionalIntField(object, "f"), 1235);  // a fraction where an integer goes: rounded
  for (const char* key : {"s", "null", "missing"}) {
    EXPECT_EQ(NumberField(object, key), std::nullopt) << key;
    EXPECT_EQ(OptionalIntField(object, key), std::nullopt) << key;
  }
  EXPECT_EQ(OptionalIntField(json::array(), "i"), std::nullopt);
}

TEST(ObjectTest, MetadataLabelsAndGeneration) {
  const json job = {{"metadata",
                     {{"name", "kjv"},
                      {"namespace", "team-a"},
                      {"generation", 4},
                      {"labels", {{"paci.dev/job-name", "kjv"}}}}}};
  EXPECT_EQ(MetaString(job, "name"), "kjv");
  EXPECT_EQ(MetaString(job, "namespace"), "team-a");
  EXPECT_EQ(Label(job, "paci.dev/job-name"), "kjv");
  EXPECT_EQ(Label(job, "paci.dev/role"), "");
  EXPECT_EQ(Generation(job), 4);
  EXPECT_EQ(Generation(json::object()), 1);
  EXPECT_FALSE(BeingDeleted(job));
  json deleted = job;
  deleted["metadata"]["deletionTimestamp"] = "2027-01-15T08:00:00Z";
  EXPECT_TRUE(BeingDeleted(deleted));
}

TEST(ObjectTest, FinalizersAreAddedOnceAndRemovedAlone) {
  json job = {{"metadata", {{"finalizers", {"other.dev/keep"}}}}};
  EXPECT_FALSE(HasFinalizer(job, "paci.dev/x"));
  job["metadata"]["finalizers"] = FinalizersWith(job, "paci.dev/x");
  EXPECT_TRUE(HasFinalizer(job, "paci.dev/x"));
  EXPECT_EQ(FinalizersWith(job, "paci.dev/x"), json({"other.dev/keep", "paci.dev/x"}));
  EXPECT_EQ(FinalizersWithout(job, "paci.dev/x"), json({"other.dev/keep"}));
  EXPECT_EQ(FinalizersWithout(json::object(), "paci.dev/x"), json::array());
}

TEST(ObjectTest, Rfc3339ToTheSecondOrMicrosecondAndBack) {
  const absl::Time t = absl::FromUnixSeconds(1'800'000'000) + absl::Microseconds(250);
  EXPECT_EQ(Rfc3339(t), "2027-01-15T08:00:00Z");
  EXPECT_EQ(Rfc3339Micro(t), "2027-01-15T08:00:00.000250Z");
  absl::Time parsed;
  ASSERT_TRUE(ParseRfc3339(Rfc3339Micro(t), &parsed));
  EXPECT_EQ(parsed, t);
  EXPECT_FALSE(ParseRfc3339("yesterday", &parsed));
}

}  // namespace
}  // namespace paci::kube
