#include "worker/data/tokenizer.h"

#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace paci {
namespace {

using ::testing::HasSubstr;

TEST(ParseTokenizerTest, BytesWithoutTheHeaderLineAreInvalidArgumentNamingWhat) {
  for (const std::string bytes : {"", "abc", "paci-tokenizer char", "tokenizer char\nab"}) {
    absl::StatusOr<std::unique_ptr<Tokenizer>> parsed = ParseTokenizer(bytes, "dir/tokenizer");
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << bytes;
    EXPECT_THAT(parsed.status().message(), HasSubstr("dir/tokenizer: not a tokenizer"));
  }
}

TEST(ParseTokenizerTest, AnUnknownKindIsInvalidArgumentNamingIt) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> parsed =
      ParseTokenizer("paci-tokenizer wordpiece\nabc", "dir/tokenizer");
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(parsed.status().message(),
              HasSubstr("dir/tokenizer: unknown tokenizer kind \"wordpiece\""));
}

TEST(ParseTokenizerTest, ABrokenBodyIsInvalidArgumentNamingWhat) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> parsed =
      ParseTokenizer("paci-tokenizer char\nba", "dir/tokenizer");
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(parsed.status().message(), HasSubstr("dir/tokenizer: "));
  parsed = ParseTokenizer("paci-tokenizer sentencepiece\nnot a model", "dir/tokenizer");
  EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(parsed.status().message(), HasSubstr("dir/tokenizer: not a SentencePiece model"));
}

TEST(FindInvalidUtf8Test, GivesTheOffsetOfTheFirstMalformedByteOrTheSize) {
  EXPECT_EQ(FindInvalidUtf8(""), 0u);
  EXPECT_EQ(FindInvalidUtf8("plain ascii, longer than eight bytes"), 36u);
  EXPECT_EQ(FindInvalidUtf8("αβγ 日本 😀"), std::string("αβγ 日本 😀").size());
  EXPECT_EQ(FindInvalidUtf8("0123456789\xC0\xAF"), 10u);
  EXPECT_EQ(FindInvalidUtf8("日\xE6\x97"), 3u);
}

TEST(ChunkEndTest, CutsJustPastTheFirstNewlineAfterTheTarget) {
  const std::string text = "aaaa\nbb\ncccccc\nd";
  EXPECT_EQ(ChunkEnd(text, 0, 3), 5u);   // after "aaaa\n"
  EXPECT_EQ(ChunkEnd(text, 0, 4), 5u);   // a newline at the target counts
  EXPECT_EQ(ChunkEnd(text, 0, 5), 8u);
  EXPECT_EQ(ChunkEnd(text, 5, 4), 15u);  // after "cccccc\n"
  EXPECT_EQ(ChunkEnd(text, 8, 7), text.size());  // no newline after the target
  EXPECT_EQ(ChunkEnd(text, 0, 100), text.size());
}

}  // namespace
}  // namespace paci
