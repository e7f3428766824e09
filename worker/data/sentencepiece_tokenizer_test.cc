#include "worker/data/sentencepiece_tokenizer.h"

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "common/temp_dir.h"
#include "common/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace paci {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

const std::string kGenesisPath = std::string(PACI_SOURCE_DIR) + "/tests/data/kjv-genesis.txt";

SentencePieceTrainingOptions SmallOptions(const std::string& model_type) {
  SentencePieceTrainingOptions options;
  options.model_type = model_type;
  options.vocab_size = 400;
  options.num_threads = 2;
  return options;
}

SentencePieceTokenizer TrainOnGenesis(const std::string& model_type) {
  absl::StatusOr<SentencePieceTokenizer> tokenizer =
      SentencePieceTokenizer::Train({kGenesisPath}, SmallOptions(model_type));
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return *std::move(tokenizer);
}

void ExpectRoundTrip(const Tokenizer& tokenizer, const std::string& text) {
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer.Encode(text);
  ASSERT_TRUE(ids.ok()) << ids.status();
  for (int32_t id : *ids) {
    ASSERT_GE(id, 0);
    ASSERT_LT(id, tokenizer.vocab_size());
  }
  EXPECT_EQ(tokenizer.Decode(*ids), text);
}

class TrainedSentencePieceTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TrainedSentencePieceTest, EncodeThenDecodeGivesBackTheTextWithItsWhitespace) {
  const SentencePieceTokenizer tokenizer = TrainOnGenesis(GetParam());
  EXPECT_EQ(tokenizer.kind(), "sentencepiece");
  EXPECT_GT(tokenizer.vocab_size(), 256);
  EXPECT_LE(tokenizer.vocab_size(), 400);
  const std::string text = ReadText(kGenesisPath).substr(0, 5000);
  ExpectRoundTrip(tokenizer, text);
  ExpectRoundTrip(tokenizer, "  two leading spaces,\n\n\ttabs\tand a trailing space ");
  // Pieces longer than a character: fewer ids than characters.
  EXPECT_LT(tokenizer.Encode(text)->size(), text.size() * 3 / 4);
}

TEST_P(TrainedSentencePieceTest, ByteFallbackEncodesCharactersAbsentFromTheTrainingText) {
  const SentencePieceTokenizer tokenizer = TrainOnGenesis(GetParam());
  ExpectRoundTrip(tokenizer, "日本語の文 😀 naïve Ωμέγα \x01");
}

TEST_P(TrainedSentencePieceTest, TrainingTheSameTextTwiceGivesTheSameModel) {
  const SentencePieceTokenizer first = TrainOnGenesis(GetParam());
  const SentencePieceTokenizer second = TrainOnGenesis(GetParam());
  EXPECT_EQ(first.Serialize(), second.Serialize());
  EXPECT_EQ(first.Id(), second.Id());
}

INSTANTIATE_TEST_SUITE_P(ModelTypes, TrainedSentencePieceTest, ::testing::Values("bpe", "unigram"));

TEST(SentencePieceTokenizerTest, ParseTokenizerOfSerializeGivesTheSameTokenizer) {
  const SentencePieceTokenizer tokenizer = TrainOnGenesis("bpe");
  EXPECT_THAT(tokenizer.Serialize(), StartsWith("paci-tokenizer sentencepiece\n"));
  absl::StatusOr<std::unique_ptr<Tokenizer>> parsed =
      ParseTokenizer(tokenizer.Serialize(), "the test's tokenizer");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ((*parsed)->kind(), "sentencepiece");
  EXPECT_EQ((*parsed)->vocab_size(), tokenizer.vocab_size());
  EXPECT_EQ((*parsed)->Id(), tokenizer.Id());
  const std::string text = "And God said, Let there be light: 光";
  EXPECT_EQ(*(*parsed)->Encode(text), *tokenizer.Encode(text));
}

TEST(SentencePieceTokenizerTest, LoadReadsAModelFile) {
  const SentencePieceTokenizer tokenizer = TrainOnGenesis("unigram");
  TempDir dir("sentencepiece-test");
  const std::string path = WriteFile(dir.path() + "/genesis.model", tokenizer.ModelProto());
  absl::StatusOr<SentencePieceTokenizer> loaded = SentencePieceTokenizer::Load(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->Id(), tokenizer.Id());
}

TEST(SentencePieceTokenizerTest, LoadOfAFileThatIsNotAModelIsInvalidArgumentNamingIt) {
  TempDir dir("sentencepiece-test");
  const std::string path = WriteFile(dir.path() + "/text.model", "In the beginning\n");
  absl::StatusOr<SentencePieceTokenizer> loaded = SentencePieceTokenizer::Load(path);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kInvalidArgument) << loaded.status();
  EXPECT_THAT(loaded.status().message(), HasSubstr(path));
  EXPECT_THAT(loaded.status().message(), HasSubstr("not a SentencePiece model"));
}

TEST(SentencePieceTokenizerTest, LoadOfAMissingFileIsNotFoundNamingIt) {
  const std::string path = ::testing::TempDir() + "/no-such.model";
  absl::StatusOr<SentencePieceTokenizer> loaded = SentencePieceTokenizer::Load(path);
  EXPECT_EQ(loaded.status().code(), absl::StatusCode::kNotFound) << loaded.status();
  EXPECT_THAT(loaded.status().message(), HasSubstr(path));
}

TEST(SentencePieceTokenizerTest, EncodeRejectsInvalidUtf8NamingTheByteOffset) {
  const SentencePieceTokenizer tokenizer = TrainOnGenesis("bpe");
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer.Encode("In the\xC0\xAF");
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ids.status().message(), "text is not valid UTF-8 at byte 6");
}

TEST(SentencePieceTokenizerTest, DecodeTurnsOutOfRangeIdsIntoUnknown) {
  const SentencePieceTokenizer tokenizer = TrainOnGenesis("bpe");
  const std::vector<int32_t> light = *tokenizer.Encode("light");
  std::vector<int32_t> ids = light;
  ids.push_back(-1);
  ids.push_back(tokenizer.vocab_size());
  EXPECT_THAT(tokenizer.Decode(ids), StartsWith("light"));
}

TEST(SentencePieceTokenizerTest, TrainNamesTheFileAndOffsetOfInvalidUtf8) {
  TempDir dir("sentencepiece-test");
  const std::string good = WriteFile(dir.path() + "/good.txt", "fine\ntext\n");
  const std::string bad = WriteFile(dir.path() + "/bad.txt", "line one\nline \xFF two\n");
  absl::StatusOr<SentencePieceTokenizer> tokenizer =
      SentencePieceTokenizer::Train({good, bad}, SmallOptions("bpe"));
  EXPECT_EQ(tokenizer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tokenizer.status().message(), bad + ": not valid UTF-8 at byte 14");
}

TEST(SentencePieceTokenizerTest, TrainRejectsBadOptionsNamingThem) {
  SentencePieceTrainingOptions options = SmallOptions("wordpiece");
  EXPECT_THAT(std::string(SentencePieceTokenizer::Train({kGenesisPath}, options).status().message()),
              StartsWith("model_type: "));
  options = SmallOptions("bpe");
  options.vocab_size = 100;
  EXPECT_THAT(std::string(SentencePieceTokenizer::Train({kGenesisPath}, options).status().message()),
              StartsWith("vocab_size: "));
}

TEST(SentencePieceTokenizerTest, TrainOfAMissingFileIsNotFoundNamingIt) {
  const std::string path = ::testing::TempDir() + "/no-such-corpus.txt";
  absl::StatusOr<SentencePieceTokenizer> tokenizer =
      SentencePieceTokenizer::Train({path}, SmallOptions("bpe"));
  EXPECT_EQ(tokenizer.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(tokenizer.status().message(), HasSubstr(path));
}

}  // namespace
}  // namespace paci
