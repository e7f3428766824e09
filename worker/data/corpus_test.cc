#include "worker/data/corpus.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/temp_dir.h"
#include "common/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "worker/data/char_tokenizer.h"
#include "worker/data/sentencepiece_tokenizer.h"
#include "worker/data/token_shards.h"

namespace paci {
namespace {

using ::testing::HasSubstr;

const std::string kGenesisPath =
    std::string(PACI_SOURCE_DIR) + "/tests/data/kjv-genesis.txt";

CorpusOptions GenesisOptions() {
  CorpusOptions options;
  options.path = kGenesisPath;
  options.seq_len = 64;
  options.micro_batch_size = 8;
  return options;
}

std::string WriteTempFile(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// A text of `n` distinct characters in increasing code point order, so token
// id i is the token at position i and a window's first id is its offset.
std::string PositionText(int n) {
  std::string text;
  for (int i = 0; i < n; ++i) {
    const char32_t c = 0x4E00 + i;  // CJK ideographs: three bytes each
    text += static_cast<char>(0xE0 | (c >> 12));
    text += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    text += static_cast<char>(0x80 | (c & 0x3F));
  }
  return text;
}

std::vector<int32_t> Row(const std::vector<int32_t>& windows, int row,
                         int seq_len) {
  const auto begin = windows.begin() + row * (seq_len + 1);
  return std::vector<int32_t>(begin, begin + seq_len + 1);
}

// Where `row` lies in tokens[begin, end), or -1 when it is not a slice of it.
int64_t Locate(const std::vector<int32_t>& tokens, int64_t begin, int64_t end,
               const std::vector<int32_t>& row) {
  const auto it = std::search(tokens.begin() + begin, tokens.begin() + end,
                              row.begin(), row.end());
  return it == tokens.begin() + end ? -1 : it - tokens.begin();
}

TEST(CorpusTest, SplitsHoldTheWholeTokenStreamWithTheTailHeldOut) {
  absl::StatusOr<Corpus> corpus = Corpus::Load(GenesisOptions());
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  absl::StatusOr<std::vector<int32_t>> tokens =
      corpus->tokenizer().Encode(ReadText(kGenesisPath));
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ(corpus->train_tokens() + corpus->validation_tokens(),
            static_cast<int64_t>(tokens->size()));
  EXPECT_NEAR(corpus->validation_tokens(), 0.05 * tokens->size(), 1);
}

TEST(CorpusTest, TrainingWindowsAreTheSameAcrossSeparateLoads) {
  absl::StatusOr<Corpus> first = Corpus::Load(GenesisOptions());
  absl::StatusOr<Corpus> second = Corpus::Load(GenesisOptions());
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(second.ok()) << second.status();
  for (uint64_t id : {0ull, 1ull, 7ull, 123456789ull, ~0ull}) {
    EXPECT_EQ(first->TrainingWindows(id), second->TrainingWindows(id))
        << "micro-batch " << id;
  }
}

TEST(CorpusTest, TrainingWindowsDoNotDependOnCallOrder) {
  absl::StatusOr<Corpus> forward = Corpus::Load(GenesisOptions());
  absl::StatusOr<Corpus> backward = Corpus::Load(GenesisOptions());
  ASSERT_TRUE(forward.ok()) << forward.status();
  ASSERT_TRUE(backward.ok()) << backward.status();
  std::vector<std::vector<int32_t>> in_order, in_reverse(20);
  for (uint64_t id = 0; id < 20; ++id) {
    in_order.push_back(forward->TrainingWindows(id));
  }
  for (uint64_t id = 20; id-- > 0;) {
    in_reverse[id] = backward->TrainingWindows(id);
  }
  EXPECT_EQ(in_order, in_reverse);
  EXPECT_EQ(forward->TrainingWindows(3), in_order[3]);  // asked again
}

TEST(CorpusTest,
     TrainingRowsAreSlicesOfTheTrainingSplitSoTargetsAreShiftedInputs) {
  const CorpusOptions options = GenesisOptions();
  absl::StatusOr<Corpus> corpus = Corpus::Load(options);
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  absl::StatusOr<std::vector<int32_t>> tokens =
      corpus->tokenizer().Encode(ReadText(kGenesisPath));
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  for (uint64_t id = 0; id < 10; ++id) {
    const std::vector<int32_t> windows = corpus->TrainingWindows(id);
    ASSERT_EQ(windows.size(), 8u * 65u);
    for (int r = 0; r < options.micro_batch_size; ++r) {
      // Inputs are row[0, 64) and targets row[1, 65]: one contiguous slice of
      // the stream makes every target the token after its input.
      EXPECT_GE(Locate(*tokens, 0, corpus->train_tokens(),
                       Row(windows, r, options.seq_len)),
                0)
          << "micro-batch " << id << " row " << r;
    }
  }
}

TEST(CorpusTest,
     TrainingWindowsNeverReadValidationTokensAndCoverTheTrainingSplit) {
  CorpusOptions options;
  options.path = WriteTempFile("training-positions.txt", PositionText(200));
  options.validation_fraction = 0.25;
  options.seq_len = 8;
  options.micro_batch_size = 4;
  absl::StatusOr<Corpus> corpus = Corpus::Load(options);
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  ASSERT_EQ(corpus->train_tokens(), 150);
  std::set<int32_t> starts;
  for (uint64_t id = 0; id < 2000; ++id) {
    const std::vector<int32_t> windows = corpus->TrainingWindows(id);
    for (int r = 0; r < options.micro_batch_size; ++r) {
      const std::vector<int32_t> row = Row(windows, r, options.seq_len);
      for (int i = 0; i <= options.seq_len; ++i) ASSERT_EQ(row[i], row[0] + i);
      ASSERT_GE(row[0], 0);
      ASSERT_LT(row.back(), corpus->train_tokens());
      starts.insert(row[0]);
    }
  }
  EXPECT_EQ(starts.size(), 150u - 8u);  // every start [0, 142) is drawn
}

TEST(CorpusTest, DifferentMicroBatchIdsGiveDifferentWindows) {
  absl::StatusOr<Corpus> corpus = Corpus::Load(GenesisOptions());
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  std::set<std::vector<int32_t>> batches;
  for (uint64_t id = 0; id < 200; ++id) {
    batches.insert(corpus->TrainingWindows(id));
  }
  EXPECT_EQ(batches.size(), 200u);
}

TEST(CorpusTest, DifferentSeedsGiveDifferentWindows) {
  CorpusOptions options = GenesisOptions();
  absl::StatusOr<Corpus> first = Corpus::Load(options);
  options.seed = 2;
  absl::StatusOr<Corpus> second = Corpus::Load(options);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_NE(first->TrainingWindows(0), second->TrainingWindows(0));
}

TEST(CorpusTest, ValidationWindowsAreIdenticalAcrossCallsAndLoads) {
  absl::StatusOr<Corpus> first = Corpus::Load(GenesisOptions());
  absl::StatusOr<Corpus> second = Corpus::Load(GenesisOptions());
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_TRUE(second.ok()) << second.status();
  for (uint64_t j = 0; j < 4; ++j) {
    const std::vector<int32_t> windows = first->ValidationWindows(j);
    EXPECT_EQ(first->ValidationWindows(j), windows);
    EXPECT_EQ(second->ValidationWindows(j), windows);
  }
  EXPECT_NE(first->ValidationWindows(0), first->ValidationWindows(1));
}

TEST(CorpusTest, ValidationRowsAreSlicesOfTheValidationSplit) {
  const CorpusOptions options = GenesisOptions();
  absl::StatusOr<Corpus> corpus = Corpus::Load(options);
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  absl::StatusOr<std::vector<int32_t>> tokens =
      corpus->tokenizer().Encode(ReadText(kGenesisPath));
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  for (uint64_t j = 0; j < 4; ++j) {
    const std::vector<int32_t> windows = corpus->ValidationWindows(j);
    ASSERT_EQ(windows.size(), 8u * 65u);
    for (int r = 0; r < options.micro_batch_size; ++r) {
      EXPECT_GE(Locate(*tokens, corpus->train_tokens(), tokens->size(),
                       Row(windows, r, options.seq_len)),
                0)
          << "eval batch " << j << " row " << r;
    }
  }
}

TEST(CorpusTest, ValidationWindowsWrapInsideTheSplitAndUseEveryStartOnce) {
  CorpusOptions options;
  options.path = WriteTempFile("validation-positions.txt", PositionText(200));
  options.validation_fraction = 0.25;
  options.seq_len = 8;
  options.micro_batch_size = 3;
  absl::StatusOr<Corpus> corpus = Corpus::Load(options);
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  // 50 validation tokens [150, 200) hold 42 window starts; 14 eval batches of
  // 3 rows take each once, and batch 14 starts over.
  std::set<int32_t> starts;
  for (uint64_t j = 0; j < 14; ++j) {
    const std::vector<int32_t> windows = corpus->ValidationWindows(j);
    for (int r = 0; r < options.micro_batch_size; ++r) {
      const std::vector<int32_t> row = Row(windows, r, options.seq_len);
      for (int i = 0; i <= options.seq_len; ++i) ASSERT_EQ(row[i], row[0] + i);
      ASSERT_GE(row[0], 150);
      ASSERT_LT(row.back(), 200);
      starts.insert(row[0]);
    }
  }
  EXPECT_EQ(starts.size(), 42u);
  EXPECT_EQ(corpus->ValidationWindows(14), corpus->ValidationWindows(0));
}

TEST(CorpusTest, LoadOfMissingFileIsNotFoundNamingCorpusPath) {
  CorpusOptions options = GenesisOptions();
  options.path = ::testing::TempDir() + "/no-such-corpus.txt";
  absl::StatusOr<Corpus> corpus = Corpus::Load(options);
  ASSERT_EQ(corpus.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(corpus.status().message(),
              HasSubstr("data.corpus_path: cannot read " + options.path));
}

TEST(CorpusTest, LoadOfDirectoryIsNotFoundNamingCorpusPath) {
  CorpusOptions options = GenesisOptions();
  options.path = ::testing::TempDir();
  absl::StatusOr<Corpus> corpus = Corpus::Load(options);
  ASSERT_EQ(corpus.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(corpus.status().message(), HasSubstr("data.corpus_path"));
}

// /dev/zero would be read until memory ran out, a FIFO would hang the stage.
TEST(CorpusTest, LoadOfADeviceOrAFifoIsRefusedWithoutReadingIt) {
  CorpusOptions options = GenesisOptions();
  options.path = "/dev/zero";
  absl::StatusOr<Corpus> corpus = Corpus::Load(options);
  ASSERT_EQ(corpus.status().code(), absl::StatusCode::kFailedPrecondition) << corpus.status();
  EXPECT_THAT(corpus.status().message(),
              HasSubstr("data.corpus_path: /dev/zero is a character device, not a regular file"));
  options.path = ::testing::TempDir() + "/corpus.fifo";
  unlink(options.path.c_str());
  ASSERT_EQ(mkfifo(options.path.c_str(), 0600), 0) << std::strerror(errno);
  corpus = Corpus::Load(options);  // no writer: returns at once
  unlink(options.path.c_str());
  ASSERT_EQ(corpus.status().code(), absl::StatusCode::kFailedPrecondition) << corpus.status();
  EXPECT_THAT(corpus.status().message(), HasSubstr("is a FIFO, not a regular file"));
}

TEST(CorpusTest, LoadOfATextOverTheSizeCapIsRefusedPointingToADataset) {
  CorpusOptions options = GenesisOptions();
  options.max_text_bytes = 1000;
  absl::StatusOr<Corpus> corpus = Corpus::Load(options);
  ASSERT_EQ(corpus.status().code(), absl::StatusCode::kFailedPrecondition) << corpus.status();
  EXPECT_THAT(corpus.status().message(), HasSubstr("is larger than 1000 bytes"));
  EXPECT_THAT(corpus.status().message(), HasSubstr("pacictl prepare-data"));
}

TEST(CorpusTest, LoadOfTooSmallCorpusIsInvalidArgumentSayingWhatIsNeeded) {
  CorpusOptions options = GenesisOptions();  // seq_len 64: 66 tokens per split
  options.path = WriteTempFile("small.txt", std::string(1000, 'a'));
  absl::StatusOr<Corpus> corpus = Corpus::Load(options);
  ASSERT_EQ(corpus.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(corpus.status().message(), HasSubstr("data.corpus_path"));
  EXPECT_THAT(corpus.status().message(), HasSubstr("at least 66"));
  EXPECT_THAT(corpus.status().message(), HasSubstr("50 for validation"));

  options.validation_fraction = 0.1;  // 100 validation tokens are enough
  EXPECT_TRUE(Corpus::Load(options).ok());
}

TEST(CorpusTest, LoadOfInvalidUtf8IsInvalidArgumentNamingCorpusPathAndByte) {
  CorpusOptions options = GenesisOptions();
  options.path = WriteTempFile("bad-utf8.txt", "In the beginning\xC0\xAF");
  absl::StatusOr<Corpus> corpus = Corpus::Load(options);
  ASSERT_EQ(corpus.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(corpus.status().message(), HasSubstr("data.corpus_path"));
  EXPECT_THAT(corpus.status().message(), HasSubstr("UTF-8 at byte 16"));
}

TEST(CorpusTest, LoadRejectsOutOfRangeOptionsNamingTheField) {
  CorpusOptions options = GenesisOptions();
  options.seq_len = 0;
  EXPECT_THAT(Corpus::Load(options).status().message(),
              HasSubstr("model.seq_len"));
  options = GenesisOptions();
  options.micro_batch_size = 0;
  EXPECT_THAT(Corpus::Load(options).status().message(),
              HasSubstr("pipeline.micro_batch_size"));
  for (double fraction : {0.0, 1.0, -0.5}) {
    options = GenesisOptions();
    options.validation_fraction = fraction;
    absl::StatusOr<Corpus> corpus = Corpus::Load(options);
    EXPECT_EQ(corpus.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(corpus.status().message(),
                HasSubstr("data.validation_fraction"));
  }
}

// Writes `tokens` as a dataset folder of `tokenizer`: its serialized bytes
// and shards of shard_tokens tokens (the last one shorter).
void WriteDataset(const std::string& dir, const Tokenizer& tokenizer,
                  const std::vector<int32_t>& tokens, size_t shard_tokens) {
  std::ofstream(dir + "/tokenizer", std::ios::binary) << tokenizer.Serialize();
  for (size_t begin = 0, index = 0; begin < tokens.size(); begin += shard_tokens, ++index) {
    absl::StatusOr<TokenShardWriter> writer =
        TokenShardWriter::Create(TokenShardPath(dir, index), tokenizer.Id(),
                                 tokenizer.vocab_size());
    ASSERT_TRUE(writer.ok()) << writer.status();
    const size_t end = std::min(tokens.size(), begin + shard_tokens);
    ASSERT_TRUE(writer->Append(absl::MakeConstSpan(tokens).subspan(begin, end - begin)).ok());
    ASSERT_TRUE(writer->Finish().ok());
  }
}

// The genesis text as a dataset of char tokens, in shards of shard_tokens.
CorpusOptions GenesisDataset(const TempDir& dir, size_t shard_tokens) {
  absl::StatusOr<CharTokenizer> tokenizer = CharTokenizer::FromText(ReadText(kGenesisPath));
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  WriteDataset(dir.path(), *tokenizer, *tokenizer->Encode(ReadText(kGenesisPath)),
               shard_tokens);
  CorpusOptions options = GenesisOptions();
  options.path.clear();
  options.dataset = dir.path();
  return options;
}

TEST(CorpusTest, ADatasetOfTheTextsTokensGivesTheSameWindowsAsTheText) {
  TempDir dir("corpus-test");
  // Shards of 1009 tokens: many windows of 65 run across a shard boundary.
  absl::StatusOr<Corpus> shards = Corpus::Load(GenesisDataset(dir, 1009));
  absl::StatusOr<Corpus> text = Corpus::Load(GenesisOptions());
  ASSERT_TRUE(shards.ok()) << shards.status();
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(shards->tokenizer().Id(), text->tokenizer().Id());
  EXPECT_EQ(shards->train_tokens(), text->train_tokens());
  EXPECT_EQ(shards->validation_tokens(), text->validation_tokens());
  for (uint64_t id = 0; id < 200; ++id) {
    ASSERT_EQ(shards->TrainingWindows(id), text->TrainingWindows(id)) << "micro-batch " << id;
  }
  for (uint64_t j = 0; j < 50; ++j) {
    ASSERT_EQ(shards->ValidationWindows(j), text->ValidationWindows(j)) << "eval batch " << j;
  }
}

// The resident kB of this process' mappings of `path` (/proc/self/smaps).
int64_t MappedResidentKb(const std::string& path) {
  std::ifstream smaps("/proc/self/smaps");
  int64_t kb = 0;
  bool inside = false;
  for (std::string line; std::getline(smaps, line);) {
    const bool header = !line.empty() && std::isxdigit(static_cast<unsigned char>(line[0])) &&
                        line.find('-') < line.find(' ');
    if (header) inside = line.size() >= path.size() &&
                         line.compare(line.size() - path.size(), path.size(), path) == 0;
    if (inside && line.rfind("Rss:", 0) == 0) kb += std::stoll(line.substr(4));
  }
  return kb;
}

// Windows drawn from a shard map its pages into this process (and the pages
// around them); the corpus lets them go once a micro-batch is copied, so what
// stays resident does not add up over a run to the size of the corpus.
TEST(CorpusTest, ShardPagesReadForWindowsDoNotStayResident) {
  TempDir dir("corpus-test");
  absl::StatusOr<CharTokenizer> tokenizer = CharTokenizer::FromText(ReadText(kGenesisPath));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const std::vector<int32_t> genesis = *tokenizer->Encode(ReadText(kGenesisPath));
  std::vector<int32_t> tokens;
  while (tokens.size() < (size_t{16} << 20)) {
    tokens.insert(tokens.end(), genesis.begin(), genesis.end());
  }
  WriteDataset(dir.path(), *tokenizer, tokens, tokens.size());  // one shard of 32 MiB or more
  CorpusOptions options = GenesisOptions();
  options.path.clear();
  options.dataset = dir.path();
  absl::StatusOr<Corpus> corpus = Corpus::Load(options);
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  const std::string shard = TokenShardPath(dir.path(), 0);
  EXPECT_EQ(MappedResidentKb(shard), 0);  // checking it read the file, not the mapping

  // What a copy maps, the shard itself shows (so the measure is not blind)...
  absl::StatusOr<TokenShard> raw = TokenShard::Open(shard, tokenizer->Id(), tokenizer->vocab_size());
  ASSERT_TRUE(raw.ok()) << raw.status();
  std::vector<int32_t> window(65);
  for (int64_t begin = 0; begin + 65 < raw->size(); begin += raw->size() / 64) {
    raw->Copy(begin, 65, window.data());
  }
  EXPECT_GE(MappedResidentKb(shard), 64 * 4);
  raw->ReleasePages();
  EXPECT_EQ(MappedResidentKb(shard), 0);
  // ...and the corpus' copies leave nothing mapped behind.
  for (uint64_t id = 0; id < 100; ++id) {
    corpus->TrainingWindows(id);
    ASSERT_EQ(MappedResidentKb(shard), 0) << "after micro-batch " << id;
  }
  corpus->ValidationWindows(0);
  EXPECT_EQ(MappedResidentKb(shard), 0);
}

TEST(CorpusTest, ValidationShardsHoldOutTheLastShards) {
  TempDir dir("corpus-test");
  absl::StatusOr<CharTokenizer> tokenizer = CharTokenizer::FromText(PositionText(200));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  WriteDataset(dir.path(), *tokenizer, *tokenizer->Encode(PositionText(200)), 60);
  CorpusOptions options;
  options.dataset = dir.path();
  options.validation_shards = 2;  // shards [0, 60) [60, 120) | [120, 180) [180, 200)
  options.seq_len = 8;
  options.micro_batch_size = 4;
  absl::StatusOr<Corpus> corpus = Corpus::Load(options);
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  EXPECT_EQ(corpus->train_tokens(), 120);
  EXPECT_EQ(corpus->validation_tokens(), 80);
  std::set<int32_t> starts;
  for (uint64_t j = 0; j < 18; ++j) {  // 72 validation starts, 4 rows each
    const std::vector<int32_t> windows = corpus->ValidationWindows(j);
    for (int r = 0; r < options.micro_batch_size; ++r) {
      const std::vector<int32_t> row = Row(windows, r, options.seq_len);
      for (int i = 0; i <= options.seq_len; ++i) ASSERT_EQ(row[i], row[0] + i);
      ASSERT_GE(row[0], 120);
      starts.insert(row[0]);
    }
  }
  EXPECT_EQ(starts.size(), 72u);
  for (uint64_t id = 0; id < 100; ++id) {
    for (int32_t token : corpus->TrainingWindows(id)) ASSERT_LT(token, 120);
  }

  options.validation_shards = 4;
  corpus = Corpus::Load(options);
  EXPECT_EQ(corpus.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(corpus.status().message(),
              HasSubstr("data.validation_shards: must be less than the 4 shards"));
}

TEST(CorpusTest, ADatasetShardOfAnotherTokenizerIsRefusedNamingIt) {
  TempDir dir("corpus-test");
  const CorpusOptions options = GenesisDataset(dir, 100000);
  std::ofstream(dir.path() + "/tokenizer", std::ios::binary)
      << CharTokenizer::FromText("abc")->Serialize();
  absl::StatusOr<Corpus> corpus = Corpus::Load(options);
  EXPECT_EQ(corpus.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(corpus.status().message(), HasSubstr("data.dataset: "));
  EXPECT_THAT(corpus.status().message(), HasSubstr(TokenShardPath(dir.path(), 0)));
}

TEST(CorpusTest, ADatasetWithoutShardsOrWithAGapIsRefused) {
  TempDir dir("corpus-test");
  CorpusOptions options = GenesisDataset(dir, 100000);  // shards 0 to 2
  std::filesystem::remove(TokenShardPath(dir.path(), 1));
  absl::StatusOr<Corpus> corpus = Corpus::Load(options);
  EXPECT_EQ(corpus.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(corpus.status().message(), HasSubstr(TokenShardPath(dir.path(), 1)));

  std::filesystem::remove(TokenShardPath(dir.path(), 0));
  std::filesystem::remove(TokenShardPath(dir.path(), 2));
  corpus = Corpus::Load(options);
  EXPECT_EQ(corpus.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(corpus.status().message(), HasSubstr("data.dataset: "));
  EXPECT_THAT(corpus.status().message(), HasSubstr("holds no token shards"));

  options.dataset = dir.path() + "/no-such-dataset";
  corpus = Corpus::Load(options);
  EXPECT_EQ(corpus.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(corpus.status().message(), HasSubstr("data.dataset: cannot read"));
}

TEST(CorpusTest, ADatasetMadeByAnotherKindOfTokenizerThanTheSpecSaysIsRefused) {
  TempDir dir("corpus-test");
  CorpusOptions options = GenesisDataset(dir, 100000);
  options.tokenizer = "char";
  EXPECT_TRUE(Corpus::Load(options).ok());
  options.tokenizer = "sentencepiece";
  absl::StatusOr<Corpus> corpus = Corpus::Load(options);
  EXPECT_EQ(corpus.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(corpus.status().message(), HasSubstr("data.tokenizer: \"sentencepiece\""));
}

TEST(CorpusTest, ATextTokenizedBySentencePieceDecodesBackToTheText) {
  SentencePieceTrainingOptions training;
  training.vocab_size = 400;
  absl::StatusOr<SentencePieceTokenizer> model =
      SentencePieceTokenizer::Train({kGenesisPath}, training);
  ASSERT_TRUE(model.ok()) << model.status();
  TempDir dir("corpus-test");
  CorpusOptions options = GenesisOptions();
  options.tokenizer = "sentencepiece";
  options.tokenizer_model = dir.path() + "/genesis.model";
  std::ofstream(options.tokenizer_model, std::ios::binary) << model->ModelProto();
  absl::StatusOr<Corpus> corpus = Corpus::Load(options);
  ASSERT_TRUE(corpus.ok()) << corpus.status();
  EXPECT_EQ(corpus->tokenizer().kind(), "sentencepiece");
  EXPECT_EQ(corpus->tokenizer().Id(), model->Id());
  const std::string text = ReadText(kGenesisPath);
  EXPECT_EQ(corpus->train_tokens() + corpus->validation_tokens(),
            static_cast<int64_t>(model->Encode(text)->size()));
  const std::vector<int32_t> window = Row(corpus->TrainingWindows(0), 0, options.seq_len);
  EXPECT_NE(text.find(corpus->tokenizer().Decode(window)), std::string::npos);

  options.tokenizer_model = kGenesisPath;  // not a model
  corpus = Corpus::Load(options);
  EXPECT_EQ(corpus.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(corpus.status().message(), HasSubstr("data.tokenizer_model: " + kGenesisPath));
}

TEST(CorpusTest, LoadRejectsSourceOptionsThatDoNotFitNamingTheField) {
  const std::pair<std::string, void (*)(CorpusOptions*)> cases[] = {
      {"data.corpus_path", [](CorpusOptions* o) { o->dataset = "/d"; }},
      {"data.corpus_path", [](CorpusOptions* o) { o->path.clear(); }},
      {"data.tokenizer", [](CorpusOptions* o) { o->tokenizer = "bpe"; }},
      {"data.tokenizer_model", [](CorpusOptions* o) { o->tokenizer = "sentencepiece"; }},
      {"data.tokenizer_model", [](CorpusOptions* o) { o->tokenizer_model = "m.model"; }},
      {"data.validation_shards", [](CorpusOptions* o) { o->validation_shards = 1; }},
  };
  for (const auto& [field, mutate] : cases) {
    CorpusOptions options = GenesisOptions();
    mutate(&options);
    absl::StatusOr<Corpus> corpus = Corpus::Load(options);
    EXPECT_EQ(corpus.status().code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_THAT(std::string(corpus.status().message()), ::testing::StartsWith(field + ": "));
  }
}

}  // namespace
}  // namespace paci
