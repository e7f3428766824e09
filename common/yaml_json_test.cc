#include "common/yaml_json.h"

#include <gtest/gtest.h>

#include "yaml-cpp/yaml.h"

namespace paci {
namespace {

TEST(YamlJsonTest, AMappingReadsByTheCoreSchemaAndDropsNulls) {
  absl::StatusOr<std::string> json = YamlMappingToJson(
      "a: True\nb: FALSE\nc: 007\nd: '5'\ne: ~\nf: [1, .5, yes]\ng: !!str 3\n", "spec");
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(*json, R"({"a":true,"b":false,"c":7,"d":"5","f":[1,0.5,"yes"],"g":"3"})");
}

TEST(YamlJsonTest, ANodeIsReadByTheSameRulesAndKeepsItsNulls) {
  const YAML::Node node = YAML::Load("audience: paci\nretries: 3\nstrict: True\nscope: null\n");
  absl::StatusOr<std::string> json = YamlNodeToJson(node, "extension");
  ASSERT_TRUE(json.ok()) << json.status();
  EXPECT_EQ(*json, R"({"audience":"paci","retries":3,"strict":true,"scope":null})");
  absl::StatusOr<std::string> scalar = YamlNodeToJson(YAML::Load("'true'"), "extension");
  ASSERT_TRUE(scalar.ok()) << scalar.status();
  EXPECT_EQ(*scalar, R"("true")");  // quoted: a string
}

TEST(YamlJsonTest, DuplicateAndNonScalarKeysAreRefusedNamingTheLine) {
  EXPECT_EQ(YamlMappingToJson("a: 1\nb: 2\na: 3\n", "spec").status().message(),
            "spec: line 3: duplicate key \"a\"");
  EXPECT_EQ(YamlNodeToJson(YAML::Load("x:\n  k: 1\n  k: 2\n"), "extension").status().message(),
            "extension: line 3: duplicate key \"k\"");
  EXPECT_EQ(YamlNodeToJson(YAML::Load("? [a, b]\n: 1\n"), "extension").status().message(),
            "extension: line 1: a key must be a plain name");
  EXPECT_EQ(YamlMappingToJson("- a\n- b\n", "spec").status().message(),
            "spec: expected a mapping at the top level");
}

}  // namespace
}  // namespace paci
