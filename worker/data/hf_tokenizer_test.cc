#include "worker/data/hf_tokenizer.h"

#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/temp_dir.h"
#include "common/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace paci {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// tests/data/make_byte_level_bpe.py made it: GPT-2's byte-level BPE, 400 tokens.
const std::string kFixturePath =
    std::string(PACI_SOURCE_DIR) + "/tests/data/byte-level-bpe.tokenizer.json";
const std::string kGenesisPath = std::string(PACI_SOURCE_DIR) + "/tests/data/kjv-genesis.txt";

HfTokenizer LoadFixture() {
  absl::StatusOr<HfTokenizer> tokenizer = HfTokenizer::Load(kFixturePath);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return *std::move(tokenizer);
}

std::vector<int32_t> EncodeOk(const Tokenizer& tokenizer, std::string_view text) {
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer.Encode(text);
  EXPECT_TRUE(ids.ok()) << ids.status();
  return ids.ok() ? *ids : std::vector<int32_t>();
}

TEST(HfTokenizerTest, EncodeThenDecodeGivesBackUtf8TextWithEmojiAndNewlines) {
  const HfTokenizer tokenizer = LoadFixture();
  for (const std::string& text :
       {std::string("In the beginning God created the heaven and the earth.\n"),
        std::string("  doubled  spaces,\ttabs\n\n\nand blank lines \n"),
        std::string("Ünïcödé: αβγ, 日本語, emoji 😀👍🏽 and a ZWJ family 👨‍👩‍👧\n"),
        std::string("\n"), std::string("")}) {
    const std::vector<int32_t> ids = EncodeOk(tokenizer, text);
    for (const int32_t id : ids) {
      ASSERT_GE(id, 0);
      ASSERT_LT(id, tokenizer.vocab_size());
    }
    EXPECT_EQ(tokenizer.Decode(ids), text);
  }
}

TEST(HfTokenizerTest, TheFixtureIsGpt2StyleByteLevelBpe) {
  const HfTokenizer tokenizer = LoadFixture();
  EXPECT_EQ(tokenizer.kind(), "tokenizer_json");
  EXPECT_EQ(tokenizer.vocab_size(), 400);
  // The special token, written out in a text, is its id (no special tokens added).
  EXPECT_EQ(tokenizer.TokenId("<|endoftext|>"), 0);
  EXPECT_EQ(EncodeOk(tokenizer, "<|endoftext|>"), std::vector<int32_t>{0});
  EXPECT_EQ(tokenizer.TokenId("not a token"), std::nullopt);
  // A space is the byte-level alphabet's "Ġ", a newline its "Ċ"; " the" is
  // one of the merges a Genesis corpus learns first.
  const std::optional<int32_t> the = tokenizer.TokenId("\xC4\xA0the");  // "Ġthe"
  ASSERT_TRUE(the.has_value());
  EXPECT_EQ(EncodeOk(tokenizer, " the"), std::vector<int32_t>{*the});
  const std::optional<int32_t> newline = tokenizer.TokenId("\xC4\x8A");  // "Ċ"
  ASSERT_TRUE(newline.has_value());
  EXPECT_EQ(EncodeOk(tokenizer, "\n"), std::vector<int32_t>{*newline});
  // A character no merge covers is its UTF-8 bytes, one token each.
  EXPECT_EQ(EncodeOk(tokenizer, "😀").size(), 4u);
}

TEST(HfTokenizerTest, TextThatIsNotUtf8IsInvalidArgumentNamingTheOffset) {
  const HfTokenizer tokenizer = LoadFixture();
  absl::StatusOr<std::vector<int32_t>> ids = tokenizer.Encode("abc\xC0\xAF");
  EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(ids.status().message(), HasSubstr("not valid UTF-8 at byte 3"));
}

TEST(HfTokenizerTest, DecodeLeavesOutIdsOutsideTheVocabulary) {
  const HfTokenizer tokenizer = LoadFixture();
  std::vector<int32_t> ids = EncodeOk(tokenizer, "And God said");
  ids.insert(ids.begin() + 1, {-1, 400, 1 << 30});
  EXPECT_EQ(tokenizer.Decode(ids), "And God said");
}

TEST(HfTokenizerTest, AMalformedFileIsInvalidArgumentNamingItWithTokenizersReason) {
  const TempDir dir("hf-tokenizer");
  for (const std::string& bytes :
       {std::string("{ \"version\": \"1.0\", "), std::string("not json at all"),
        std::string("{}"), std::string("[1, 2, 3]")}) {
    const std::string path = WriteFile(dir.path() + "/tokenizer.json", bytes);
    absl::StatusOr<HfTokenizer> tokenizer = HfTokenizer::Load(path);
    ASSERT_FALSE(tokenizer.ok()) << bytes;
    EXPECT_EQ(tokenizer.status().code(), absl::StatusCode::kInvalidArgument) << bytes;
    EXPECT_THAT(std::string(tokenizer.status().message()),
                StartsWith(path + ": not a tokenizer.json: "));
    // tokenizers' own reason follows (serde's, with a line and column or a field).
    EXPECT_GT(tokenizer.status().message().size(), path.size() + 24) << bytes;
  }
  // A model whose merges name tokens that are not in its vocabulary.
  nlohmann::json json = nlohmann::json::parse(ReadText(kFixturePath));
  json["model"]["merges"].push_back(nlohmann::json::array({"no-such", "token"}));
  absl::StatusOr<HfTokenizer> bad_merge = HfTokenizer::FromJson(json.dump());
  EXPECT_EQ(bad_merge.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_merge.status().message(), HasSubstr("not a tokenizer.json"));
}

TEST(HfTokenizerTest, AFileThatCannotBeReadIsNotFoundNamingIt) {
  const TempDir dir("hf-tokenizer");
  absl::StatusOr<HfTokenizer> tokenizer = HfTokenizer::Load(dir.path() + "/none.json");
  EXPECT_EQ(tokenizer.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(tokenizer.status().message(), HasSubstr(dir.path() + "/none.json"));
}

TEST(HfTokenizerTest, SerializeThenParseTokenizerGivesTheSameTokenizer) {
  const HfTokenizer tokenizer = LoadFixture();
  const std::string serialized = tokenizer.Serialize();
  EXPECT_THAT(serialized, StartsWith("paci-tokenizer tokenizer_json\n{"));
  EXPECT_EQ(serialized.substr(serialized.find('\n') + 1), ReadText(kFixturePath));
  absl::StatusOr<std::unique_ptr<Tokenizer>> parsed = ParseTokenizer(serialized, "dataset");
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ((*parsed)->kind(), "tokenizer_json");
  EXPECT_EQ((*parsed)->vocab_size(), tokenizer.vocab_size());
  EXPECT_EQ((*parsed)->Id(), tokenizer.Id());
  const std::string text = ReadText(kGenesisPath).substr(0, 5000);
  EXPECT_EQ(EncodeOk(**parsed, text), EncodeOk(tokenizer, text));

  absl::StatusOr<std::unique_ptr<Tokenizer>> broken =
      ParseTokenizer("paci-tokenizer tokenizer_json\n{\"model\": 1}", "dir/tokenizer");
  EXPECT_EQ(broken.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(broken.status().message()),
              StartsWith("dir/tokenizer: not a tokenizer.json: "));
}

// Encodes Genesis (its verses start "\n  2 And") and lines that start or
// end with spaces, blank lines and punctuation, where a byte-level
// pre-tokenizer splits differently when the text is cut at the newline, in
// pieces cut where NextCut says: they must give the ids of the whole.
void ExpectChunksEncodeLikeTheWhole(const HfTokenizer& tokenizer) {
  std::string text;
  for (int i = 0; i < 2; ++i) {
    text += ReadText(kGenesisPath) +
            "end \n start\n\nword\n'tis 12\n34 (x)\n\"y\" \n\nz.\n\n   \n  \t.\n";
  }
  const std::vector<int32_t> whole = EncodeOk(tokenizer, text);
  std::vector<int32_t> joined;
  int chunks = 0;
  for (size_t begin = 0, end; begin < text.size(); begin = end) {
    end = std::min(tokenizer.NextCut(text, begin + 4096), text.size());
    const std::string_view chunk = std::string_view(text).substr(begin, end - begin);
    const std::vector<int32_t> ids = EncodeOk(tokenizer, chunk);
    joined.insert(joined.end(), ids.begin(), ids.end());
    ++chunks;
  }
  EXPECT_GT(chunks, 90);
  EXPECT_EQ(joined, whole);
}

TEST(HfTokenizerTest, ChunksCutWhereNextCutSaysEncodeToTheIdsOfTheWholeText) {
  ExpectChunksEncodeLikeTheWhole(LoadFixture());
}

TEST(HfTokenizerTest, ChunksOfALlama3PreTokenizerEncodeToTheIdsOfTheWholeText) {
  // Llama 3's tokenizer.json: its own expression (digits in threes, newlines
  // kept with the punctuation before them), then bytes without GPT-2's.
  nlohmann::json json = nlohmann::json::parse(ReadText(kFixturePath));
  json["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern",
          {{"Regex", R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|)"
                     R"( ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
         {"behavior", "Isolated"},
         {"invert", false}},
        {{"type", "ByteLevel"},
         {"add_prefix_space", false},
         {"trim_offsets", true},
         {"use_regex", false}}}}};
  absl::StatusOr<HfTokenizer> tokenizer = HfTokenizer::FromJson(json.dump());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ(tokenizer->NextCut("x\n y", 0), 2u);
  ExpectChunksEncodeLikeTheWhole(*tokenizer);
}

TEST(HfTokenizerTest, NextCutIsALoneNewlineOrBeforeTheLastSpaceThatStartsALine) {
  const HfTokenizer tokenizer = LoadFixture();
  constexpr size_t kNone = std::string::npos;
  EXPECT_EQ(tokenizer.NextCut("x\ny", 0), 2u);
  EXPECT_EQ(tokenizer.NextCut("x\n y", 0), 2u);
  EXPECT_EQ(tokenizer.NextCut("x.\n  2 And", 0), 4u);   // "x.\n " | " 2 And"
  EXPECT_EQ(tokenizer.NextCut("x \n\n  (y", 0), 5u);   // "x \n\n " | " (y"
  EXPECT_EQ(tokenizer.NextCut("x\n\ny", 0), kNone);    // "\n\n" may be one token
  EXPECT_EQ(tokenizer.NextCut("x \ny", 0), kNone);      // so may " \n"
  EXPECT_EQ(tokenizer.NextCut("x\n\t y", 0), kNone);   // a tab, not a space
  EXPECT_EQ(tokenizer.NextCut("\n y", 0), kNone);       // nothing before the run
  EXPECT_EQ(tokenizer.NextCut("x\ny\n\nz\nw", 2), 7u);  // newlines at or after text[2]
  // The run reaches the end of the text: what comes next decides.
  EXPECT_EQ(tokenizer.NextCut("x\n", 0), kNone);
  EXPECT_EQ(tokenizer.NextCut("x\n  ", 0), kNone);
  EXPECT_EQ(tokenizer.NextCut("x\n\ny\n", 0), kNone);
}

TEST(HfTokenizerTest, ATokenizerThatAddsAPrefixSpaceToEachTextIsNeverCut) {
  nlohmann::json json = nlohmann::json::parse(ReadText(kFixturePath));
  json["pre_tokenizer"]["add_prefix_space"] = true;
  absl::StatusOr<HfTokenizer> tokenizer = HfTokenizer::FromJson(json.dump());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ(tokenizer->NextCut("x\ny\nz", 0), std::string::npos);
}

TEST(HfTokenizerTest, EncodeFromSeveralThreadsAtOnceGivesTheSameIds) {
  const HfTokenizer tokenizer = LoadFixture();
  const std::string text = ReadText(kGenesisPath).substr(0, 20000);
  const std::vector<int32_t> expected = EncodeOk(tokenizer, text);
  std::vector<std::vector<int32_t>> got(4);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < got.size(); ++t) {
    threads.emplace_back([&, t] { got[t] = *tokenizer.Encode(text); });
  }
  for (std::thread& thread : threads) thread.join();
  for (const std::vector<int32_t>& ids : got) EXPECT_EQ(ids, expected);
}

TEST(HfTokenizerTest, AMovedTokenizerKeepsWorking) {
  HfTokenizer tokenizer = LoadFixture();
  const std::vector<int32_t> ids = EncodeOk(tokenizer, "Abram");
  HfTokenizer moved = std::move(tokenizer);
  EXPECT_EQ(EncodeOk(moved, "Abram"), ids);
  HfTokenizer assigned = LoadFixture();
  assigned = std::move(moved);
  EXPECT_EQ(assigned.Decode(ids), "Abram");
}

}  // namespace
}  // namespace paci
