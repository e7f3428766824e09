#include "common/text_formats.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace paci {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

TEST(ParseKeyValuesTest, PairsInOrderWithEmptyItemsSkippedAndEqualsInValues) {
  auto pairs = ParseKeyValues("gpu=h100,,zone=a=b,empty=", "--labels");
  ASSERT_TRUE(pairs.ok()) << pairs.status();
  EXPECT_THAT(*pairs, ElementsAre(Pair("gpu", "h100"), Pair("zone", "a=b"), Pair("empty", "")));
  EXPECT_TRUE(ParseKeyValues("", "--labels")->empty());
}

TEST(ParseKeyValuesTest, AnItemWithoutAKeyIsRefusedNamingTheFlagAndTheItem) {
  for (const char* bad : {"gpu", "=h100", "a=1,nokey"}) {
    auto pairs = ParseKeyValues(bad, "--selector");
    ASSERT_FALSE(pairs.ok()) << bad;
    EXPECT_EQ(pairs.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(std::string(pairs.status().message()), HasSubstr("--selector: \""));
    EXPECT_THAT(std::string(pairs.status().message()), HasSubstr("is not KEY=VALUE"));
  }
}

TEST(JsonStringTest, QuotesAndControlCharactersAreEscapedUtf8PassesThrough) {
  EXPECT_EQ(JsonString("plain"), "\"plain\"");
  EXPECT_EQ(JsonString("a\"b\\c\nd\te\rf"), "\"a\\\"b\\\\c\\nd\\te\\rf\"");
  EXPECT_EQ(JsonString(std::string("\x01\x1f", 2)), "\"\\u0001\\u001f\"");
  EXPECT_EQ(JsonString("Génesis"), "\"Génesis\"");
}

}  // namespace
}  // namespace paci
