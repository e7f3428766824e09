#include "worker/data/char_tokenizer.h"

#include <memory>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace paci {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(CharTokenizerTest, EncodeThenDecodeRoundTripsMultiByteText) {
  const std::string text = "αβγ – naïve 日本 😀";
  absl::StatusOr<CharTokenizer> tokenizer = CharTokenizer::FromText(text);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer->Encode(text);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(ids->size(), 16u);  // code points, not bytes
  EXPECT_EQ(tokenizer->Decode(*ids), text);
}

TEST(CharTokenizerTest, VocabularyHoldsEachDistinctCodePointOnce) {
  absl::StatusOr<CharTokenizer> tokenizer = CharTokenizer::FromText("ααβ aa");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ(tokenizer->vocab_size(), 4);  // ' ', 'a', 'α', 'β'
}

TEST(CharTokenizerTest, IdsAreSortedByCodePoint) {
  absl::StatusOr<CharTokenizer> tokenizer = CharTokenizer::FromText("日cαa b");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer->Encode(" abcα日");
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_THAT(*ids, ElementsAre(0, 1, 2, 3, 4, 5));
}

TEST(CharTokenizerTest, AcceptsEveryEncodingLengthUpToTheLastCodePoint) {
  // U+0000, U+007F, U+0080, U+07FF, U+0800, U+D7FF, U+E000, U+FFFF,
  // U+10000, U+10FFFF: the edges of each UTF-8 length and of the surrogates.
  constexpr char kEdges[] =
      "\x00\x7F\xC2\x80\xDF\xBF\xE0\xA0\x80\xED\x9F\xBF\xEE\x80\x80\xEF\xBF\xBF"
      "\xF0\x90\x80\x80\xF4\x8F\xBF\xBF";
  const std::string text(kEdges, sizeof(kEdges) - 1);
  absl::StatusOr<CharTokenizer> tokenizer = CharTokenizer::FromText(text);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ(tokenizer->vocab_size(), 10);
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer->Encode(text);
  ASSERT_TRUE(ids.ok()) << ids.status();
  EXPECT_EQ(tokenizer->Decode(*ids), text);
}

struct InvalidUtf8Case {
  std::string name;
  std::string text;
  int offset;
};

class CharTokenizerInvalidUtf8Test
    : public ::testing::TestWithParam<InvalidUtf8Case> {};

TEST_P(CharTokenizerInvalidUtf8Test, FromTextRejectsItNamingTheByteOffset) {
  absl::StatusOr<CharTokenizer> tokenizer =
      CharTokenizer::FromText(GetParam().text);
  ASSERT_EQ(tokenizer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(
      tokenizer.status().message(),
      "corpus is not valid UTF-8 at byte " + std::to_string(GetParam().offset));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, CharTokenizerInvalidUtf8Test,
    ::testing::Values(
        InvalidUtf8Case{"LoneContinuationByte", "ab\x80", 2},
        InvalidUtf8Case{"OverlongTwoByteSlash", "a\xC0\xAF", 1},
        InvalidUtf8Case{"OverlongTwoByteC1", "\xC1\xBF", 0},
        InvalidUtf8Case{"OverlongThreeByte", "ok\xE0\x80\xAF", 2},
        InvalidUtf8Case{"OverlongFourByte", "\xF0\x8F\xBF\xBF", 0},
        InvalidUtf8Case{"HighSurrogate", "x\xED\xA0\x80", 1},
        InvalidUtf8Case{"LowSurrogate", "xy\xED\xBF\xBF", 2},
        InvalidUtf8Case{"AboveLastCodePoint", "\xF4\x90\x80\x80", 0},
        InvalidUtf8Case{"LeadByteF5", "abc\xF5\x80\x80\x80", 3},
        InvalidUtf8Case{"LeadByteFF", "\xFF", 0},
        InvalidUtf8Case{"TruncatedAtEnd", "日\xE6\x97", 3},
        InvalidUtf8Case{"TruncatedBeforeAscii", "α\xE6\x97z", 2},
        InvalidUtf8Case{"TruncatedFourByte", "\xF0\x9F\x98", 0}),
    [](const auto& info) { return info.param.name; });

TEST(CharTokenizerTest, EncodeRejectsUnknownCharacterNamingCodePointAndOffset) {
  absl::StatusOr<CharTokenizer> tokenizer = CharTokenizer::FromText("abc");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer->Encode("abα日");
  ASSERT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ids.status().message(),
            "character U+03B1 at byte 2 is not in the vocabulary");

  ids = tokenizer->Encode("ab\U0001F600");
  ASSERT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ids.status().message(), HasSubstr("U+1F600 at byte 2"));
}

TEST(CharTokenizerTest, EncodeRejectsInvalidUtf8NamingTheByteOffset) {
  absl::StatusOr<CharTokenizer> tokenizer = CharTokenizer::FromText("abc");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer->Encode("ab\xC0\xAF");
  ASSERT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ids.status().message(), "text is not valid UTF-8 at byte 2");
}

TEST(CharTokenizerTest, DecodeTurnsOutOfRangeIdsIntoReplacementCharacter) {
  absl::StatusOr<CharTokenizer> tokenizer = CharTokenizer::FromText("ab");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ(tokenizer->Decode({0, -1, 1, 2}), "a\uFFFDb\uFFFD");
}

TEST(CharTokenizerTest, EmptyTextGivesEmptyVocabulary) {
  absl::StatusOr<CharTokenizer> tokenizer = CharTokenizer::FromText("");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ(tokenizer->vocab_size(), 0);
  EXPECT_EQ(tokenizer->Decode({0}), "\uFFFD");
}

TEST(CharTokenizerTest, SerializeThenParseTokenizerGivesTheSameTokenizer) {
  const std::string text = "In the beginning\n\0αβ 日本 😀";
  absl::StatusOr<CharTokenizer> tokenizer = CharTokenizer::FromText(text);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ(tokenizer->kind(), "char");
  const std::string serialized = tokenizer->Serialize();
  EXPECT_EQ(serialized.substr(0, 20), "paci-tokenizer char\n");
  absl::StatusOr<std::unique_ptr<Tokenizer>> parsed = ParseTokenizer(serialized, "tokenizer");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ((*parsed)->kind(), "char");
  EXPECT_EQ((*parsed)->vocab_size(), tokenizer->vocab_size());
  EXPECT_EQ((*parsed)->Serialize(), serialized);
  EXPECT_EQ((*parsed)->Id(), tokenizer->Id());
  EXPECT_EQ(*(*parsed)->Encode(text), *tokenizer->Encode(text));
}

TEST(CharTokenizerTest, IdIsSixteenHexDigitsThatDifferForDifferentVocabularies) {
  const std::string id = CharTokenizer::FromText("abc")->Id();
  EXPECT_EQ(id.size(), 16u);
  EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_EQ(CharTokenizer::FromText("cabbac")->Id(), id);  // the same characters
  EXPECT_NE(CharTokenizer::FromText("abd")->Id(), id);
}

TEST(CharTokenizerTest, FromCodePointsSortsAndDropsRepeats) {
  absl::StatusOr<CharTokenizer> tokenizer =
      CharTokenizer::FromCodePoints({U'日', U'a', U'α', U'a'});
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ(tokenizer->Serialize(), CharTokenizer::FromText("α日a")->Serialize());
  EXPECT_EQ(CharTokenizer::FromCodePoints({0xD800}).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CharTokenizer::FromCodePoints({0x110000}).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(CharTokenizerTest, ParseRejectsAVocabularyOutOfOrderOrNotUtf8) {
  EXPECT_TRUE(CharTokenizer::Parse("abc").ok());
  EXPECT_THAT(CharTokenizer::Parse("acb").status().message(),
              HasSubstr("not in increasing code point order at byte 2"));
  EXPECT_THAT(CharTokenizer::Parse("aa").status().message(), HasSubstr("at byte 1"));
  EXPECT_THAT(CharTokenizer::Parse("a\xFF").status().message(),
              HasSubstr("not valid UTF-8 at byte 1"));
}

}  // namespace
}  // namespace paci
