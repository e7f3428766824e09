#include "tools/prepare_data.h"

#include <sys/stat.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/temp_dir.h"
#include "common/test_files.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "worker/data/corpus.h"
#include "worker/data/sentencepiece_tokenizer.h"
#include "worker/data/token_shards.h"

namespace paci {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

const std::string kGenesisPath = std::string(PACI_SOURCE_DIR) + "/tests/data/kjv-genesis.txt";

// Every file of a folder by name, with its bytes.
std::map<std::string, std::string> Contents(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    files[entry.path().filename().string()] = ReadText(entry.path().string());
  }
  return files;
}

std::vector<std::string> Names(const std::string& dir) {
  std::vector<std::string> names;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// `bytes` gzip-compressed into `path`.
std::string WriteGzip(const std::string& path, const std::string& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size()));
  gzclose(file);
  return path;
}

// Genesis as JSONL documents of 20 lines each under `field`, and the text
// prepare-data makes of them (each document followed by a newline).
struct Documents {
  std::string jsonl;
  std::string text;
};
Documents GenesisDocuments(const std::string& field) {
  std::istringstream lines(ReadText(kGenesisPath));
  Documents documents;
  std::string line;
  std::string document;
  for (int n = 1; std::getline(lines, line); ++n) {
    absl::StrAppend(&document, line, n % 20 == 0 ? "" : "\n");
    if (n % 20 == 0) {
      documents.jsonl += nlohmann::json{{"id", n}, {field, document}}.dump() + "\n";
      documents.text += document + "\n";
      document.clear();
    }
  }
  return documents;
}

class PrepareDataTest : public ::testing::Test {
 protected:
  // Small chunks and shards, so that a small text has many of both.
  PrepareDataOptions Options(const std::string& out_name) const {
    PrepareDataOptions options;
    options.inputs = {kGenesisPath};
    options.out = dir_.path() + "/" + out_name;
    options.shard_tokens = 30000;
    options.chunk_bytes = 4096;
    options.threads = 2;
    return options;
  }

  std::string Path(const std::string& name) const { return dir_.path() + "/" + name; }

  // InvalidArgument (or `code`) with `what` in the message, and no folder
  // but the inputs' left in the test's folder.
  void ExpectRefused(const PrepareDataOptions& options, const std::string& what,
                     absl::StatusCode code = absl::StatusCode::kInvalidArgument) {
    const std::vector<std::string> before = Names(dir_.path());
    absl::StatusOr<PrepareDataResult> result = PrepareData(options);
    EXPECT_EQ(result.status().code(), code) << result.status();
    EXPECT_THAT(result.status().message(), HasSubstr(what));
    EXPECT_EQ(Names(dir_.path()), before) << "something was left behind";
  }

  TempDir dir_{"prepare-data-test"};
};

TEST_F(PrepareDataTest, ACharDatasetGivesTheSameWindowsAsTheTextItWasMadeOf) {
  absl::StatusOr<PrepareDataResult> result = PrepareData(Options("genesis"));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->tokenizer_kind, "char");
  EXPECT_EQ(result->bytes, static_cast<int64_t>(fs::file_size(kGenesisPath)));
  EXPECT_EQ(result->shards, (result->tokens + 29999) / 30000);
  EXPECT_GT(result->shards, 3);
  const std::vector<std::string> names = Names(Path("genesis"));
  EXPECT_EQ(names.front(), kDatasetRecordFile);
  EXPECT_EQ(names[1], "shard-00000.bin");
  EXPECT_EQ(names.back(), "tokenizer");

  CorpusOptions text;
  text.path = kGenesisPath;
  CorpusOptions dataset;
  dataset.dataset = Path("genesis");
  absl::StatusOr<Corpus> from_text = Corpus::Load(text);
  absl::StatusOr<Corpus> from_dataset = Corpus::Load(dataset);
  ASSERT_TRUE(from_text.ok()) << from_text.status();
  ASSERT_TRUE(from_dataset.ok()) << from_dataset.status();
  EXPECT_EQ(from_dataset->tokenizer().vocab_size(), result->vocab_size);
  EXPECT_EQ(from_dataset->train_tokens(), from_text->train_tokens());
  for (uint64_t id = 0; id < 100; ++id) {
    ASSERT_EQ(from_dataset->TrainingWindows(id), from_text->TrainingWindows(id)) << id;
  }
}

// The dataset is as readable as a folder made with mkdir: the workers that map it run as
// another user (65532 in the images).
TEST_F(PrepareDataTest, TheDatasetFolderTakesTheUmaskNotOwnerOnly) {
  const mode_t mask = umask(022);
  absl::StatusOr<PrepareDataResult> result = PrepareData(Options("genesis"));
  umask(mask);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(fs::status(Path("genesis")).permissions() & fs::perms::all,
            fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                fs::perms::others_read | fs::perms::others_exec);
  EXPECT_EQ(fs::status(Path("genesis") + "/shard-00000.bin").permissions() & fs::perms::others_read,
            fs::perms::others_read);
}

TEST_F(PrepareDataTest, TheOutputIsTheSameWithOneAndFourThreads) {
  for (const std::string tokenizer : {"char", "bpe", "unigram"}) {
    PrepareDataOptions one = Options(tokenizer + "-1");
    PrepareDataOptions four = Options(tokenizer + "-4");
    for (PrepareDataOptions* options : {&one, &four}) {
      options->tokenizer = tokenizer;
      options->vocab_size = tokenizer == "char" ? 0 : 400;
    }
    one.threads = 1;
    four.threads = 4;
    ASSERT_TRUE(PrepareData(one).ok()) << PrepareData(one).status();
    ASSERT_TRUE(PrepareData(four).ok()) << PrepareData(four).status();
    // Not EXPECT_EQ: it would print the shards.
    EXPECT_TRUE(Contents(one.out) == Contents(four.out)) << tokenizer;
  }
}

// The text of a dataset folder's shards, decoded with its tokenizer.
std::string DecodeDataset(const std::string& dir) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      ParseTokenizer(ReadText(dir + "/tokenizer"), "tokenizer");
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  if (!tokenizer.ok()) return "";
  std::vector<int32_t> ids;
  for (int64_t i = 0;; ++i) {
    if (!fs::exists(TokenShardPath(dir, i))) break;
    absl::StatusOr<TokenShard> shard =
        TokenShard::Open(TokenShardPath(dir, i), (*tokenizer)->Id(), (*tokenizer)->vocab_size());
    EXPECT_TRUE(shard.ok()) << shard.status();
    if (!shard.ok()) return "";
    std::vector<int32_t> shard_ids(shard->size());
    shard->Copy(0, shard->size(), shard_ids.data());
    ids.insert(ids.end(), shard_ids.begin(), shard_ids.end());
  }
  return (*tokenizer)->Decode(ids);
}

TEST_F(PrepareDataTest, JsonlDocumentsPlainOrGzippedAreTheTextOfTheirField) {
  const Documents documents = GenesisDocuments("content");
  ASSERT_GT(documents.text.size(), 100000u);
  const std::string plain = WriteFile(Path("genesis.jsonl"), documents.jsonl);
  const std::string gzipped = WriteGzip(Path("genesis.jsonl.gz"), documents.jsonl);
  ASSERT_LT(fs::file_size(gzipped), fs::file_size(plain) / 2);
  for (const std::string tokenizer : {"char", "bpe"}) {
    for (const std::string& input : {plain, gzipped}) {
      SCOPED_TRACE(tokenizer + " " + input);
      PrepareDataOptions options = Options(tokenizer + (input == plain ? "-plain" : "-gzipped"));
      options.inputs = {input};
      options.text_field = "content";
      options.tokenizer = tokenizer;
      options.vocab_size = tokenizer == "bpe" ? 400 : 0;
      std::ostringstream progress;
      options.progress = &progress;
      absl::StatusOr<PrepareDataResult> result = PrepareData(options);
      ASSERT_TRUE(result.ok()) << result.status();
      EXPECT_EQ(result->bytes, static_cast<int64_t>(fs::file_size(input)));
      EXPECT_EQ(result->skipped_lines, 0);
      EXPECT_EQ(DecodeDataset(options.out), documents.text);
      EXPECT_THAT(progress.str(), HasSubstr("tokenizing [##############################] 100%"));
      EXPECT_EQ(Names(options.out).back(), "tokenizer") << "no training text left behind";
    }
  }
  // A gzipped text file is its text.
  PrepareDataOptions options = Options("text-gz");
  options.inputs = {WriteGzip(Path("genesis.txt.gz"), ReadText(kGenesisPath))};
  ASSERT_TRUE(PrepareData(options).ok());
  EXPECT_EQ(DecodeDataset(options.out), ReadText(kGenesisPath));
}

TEST_F(PrepareDataTest, ABadJsonlLineIsRefusedNamingFileAndLineUnlessSkipped) {
  const std::string good = nlohmann::json{{"text", "In the beginning"}}.dump();
  const std::string jsonl =
      WriteFile(Path("docs.jsonl"), good + "\n\n" + good + "\n{\"text\": \"unclosed\n" +
                                        "{\"title\": \"no text\"}\n[1, 2]\n{\"text\": 7}\n" +
                                        good + "\n");
  PrepareDataOptions options = Options("docs");
  options.inputs = {jsonl};
  ExpectRefused(options, jsonl + ":4: not JSON");
  options.tokenizer = "bpe";
  options.vocab_size = 260;
  ExpectRefused(options, jsonl + ":4: not JSON");

  options = Options("docs");
  options.inputs = {jsonl};
  options.skip_bad_lines = true;
  std::ostringstream progress;
  options.progress = &progress;
  absl::StatusOr<PrepareDataResult> result = PrepareData(options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->skipped_lines, 4);
  EXPECT_EQ(DecodeDataset(options.out), "In the beginning\nIn the beginning\nIn the beginning\n");
  EXPECT_THAT(progress.str(), HasSubstr("skipped " + jsonl + ":4: not JSON"));
  EXPECT_THAT(progress.str(), HasSubstr(jsonl + ":5: has no field \"text\""));
  EXPECT_THAT(progress.str(), HasSubstr(jsonl + ":6: not a JSON object"));
  EXPECT_THAT(progress.str(), HasSubstr(jsonl + ":7: field \"text\" is not a string"));
  EXPECT_THAT(progress.str(), HasSubstr("skipped 4 bad .jsonl lines"));

  options = Options("utf8");
  options.inputs = {WriteFile(Path("utf8.jsonl"), good + "\n{\"text\": \"b\xC0\xAF\"}\n")};
  ExpectRefused(options, Path("utf8.jsonl") + ":2: not JSON");
}

TEST_F(PrepareDataTest, AnEndlessLineOfAGzipBombIsRefusedNamingTheFile) {
  // 80 MiB of one letter, a few hundred KiB compressed: one line past the cap.
  const std::string endless(size_t{80} << 20, 'a');
  PrepareDataOptions options = Options("bomb-jsonl");
  options.inputs = {WriteGzip(Path("bomb.jsonl.gz"), "{\"text\": \"a\"}\n{\"text\": \"" + endless)};
  ExpectRefused(options, Path("bomb.jsonl.gz") + ":2: a line longer than 67108864 bytes");
  options = Options("bomb-text");
  options.inputs = {WriteGzip(Path("bomb.txt.gz"), "In the beginning\n" + endless)};
  ExpectRefused(options, Path("bomb.txt.gz") + ": no newline in the ");
}

TEST_F(PrepareDataTest, ATruncatedGzipIsRefusedNamingTheFile) {
  const std::string whole = WriteGzip(Path("whole.txt.gz"), ReadText(kGenesisPath));
  const std::string bytes = ReadText(whole);
  const std::string cut = WriteFile(Path("cut.txt.gz"), bytes.substr(0, bytes.size() / 2));
  PrepareDataOptions options = Options("cut");
  options.inputs = {cut};
  ExpectRefused(options, "cannot read " + cut, absl::StatusCode::kNotFound);
}

TEST_F(PrepareDataTest, ABpeDatasetDecodesBackToItsInputsInOrder) {
  PrepareDataOptions options = Options("bpe");
  options.inputs = {kGenesisPath, WriteFile(Path("coda.txt"), "The end: 終わり 🙂\n")};
  options.tokenizer = "bpe";
  options.vocab_size = 400;
  absl::StatusOr<PrepareDataResult> result = PrepareData(options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->tokenizer_kind, "sentencepiece");
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      ParseTokenizer(ReadText(Path("bpe/tokenizer")), "tokenizer");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < result->shards; ++i) {
    absl::StatusOr<TokenShard> shard = TokenShard::Open(
        TokenShardPath(Path("bpe"), i), (*tokenizer)->Id(), (*tokenizer)->vocab_size());
    ASSERT_TRUE(shard.ok()) << shard.status();
    std::vector<int32_t> shard_ids(shard->size());
    shard->Copy(0, shard->size(), shard_ids.data());
    ids.insert(ids.end(), shard_ids.begin(), shard_ids.end());
  }
  EXPECT_EQ(static_cast<int64_t>(ids.size()), result->tokens);
  EXPECT_EQ((*tokenizer)->Decode(ids), ReadText(kGenesisPath) + "The end: 終わり 🙂\n");
}

TEST_F(PrepareDataTest, ATokenizerModelFileIsUsedAsItIs) {
  SentencePieceTrainingOptions training;
  training.model_type = "unigram";
  training.vocab_size = 400;
  absl::StatusOr<SentencePieceTokenizer> model =
      SentencePieceTokenizer::Train({kGenesisPath}, training);
  ASSERT_TRUE(model.ok()) << model.status();
  PrepareDataOptions options = Options("unigram");
  options.tokenizer_model = WriteFile(Path("genesis.model"), model->ModelProto());
  ASSERT_TRUE(PrepareData(options).ok()) << PrepareData(options).status();
  EXPECT_EQ(ReadText(Path("unigram/tokenizer")), model->Serialize());
}

TEST_F(PrepareDataTest, ItPrintsAFinalLineWithShardsTokensAndVocabulary) {
  std::ostringstream progress;
  PrepareDataOptions options = Options("genesis");
  options.progress = &progress;
  absl::StatusOr<PrepareDataResult> result = PrepareData(options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_THAT(progress.str(), HasSubstr("tokenizing [##############################] 100%"));
  EXPECT_THAT(progress.str(),
              HasSubstr(absl::StrCat("wrote ", options.out, ": ", result->shards, " shards")));
  EXPECT_THAT(progress.str(), HasSubstr("tokens/s"));
  EXPECT_THAT(progress.str(), HasSubstr("(char)"));
  // Not a terminal: the finished bar once, as a line.
  const std::string done = "tokenizing [##############################] 100%";
  EXPECT_EQ(progress.str().find(done), progress.str().rfind(done));
  EXPECT_EQ(progress.str().find('\r'), std::string::npos);
}

// In a pod, --message_file is its terminationMessagePath: what its status says.
TEST_F(PrepareDataTest, TheMessageFileHoldsTheClosingLineOrTheError) {
  PrepareDataOptions options = Options("genesis");
  options.message_file = Path("message");
  absl::StatusOr<PrepareDataResult> result = PrepareData(options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_THAT(ReadText(Path("message")),
              HasSubstr(absl::StrCat("wrote ", options.out, ": ", result->shards, " shards")));

  options = Options("bad");
  options.message_file = Path("message");
  options.inputs = {WriteFile(Path("bad.jsonl"), "{\"text\": \"a\"}\nnot json\n")};
  ASSERT_FALSE(PrepareData(options).ok());
  EXPECT_THAT(ReadText(Path("message")), HasSubstr("prepare-data: " + Path("bad.jsonl") + ":2: "));
}

TEST_F(PrepareDataTest, InputsAreFilesFoldersAndGlobsInOrder) {
  fs::create_directories(Path("texts/sub"));
  WriteFile(Path("texts/b.txt"), "b");
  WriteFile(Path("texts/a.txt"), "a");
  WriteFile(Path("texts/c.md"), "c");
  WriteFile(Path("texts/sub/d.txt"), "d");
  EXPECT_THAT(*ExpandInputs({Path("texts")}),
              ElementsAre(Path("texts/a.txt"), Path("texts/b.txt"), Path("texts/c.md")));
  EXPECT_THAT(*ExpandInputs({Path("texts/c.md"), Path("texts/*.txt")}),
              ElementsAre(Path("texts/c.md"), Path("texts/a.txt"), Path("texts/b.txt")));

  EXPECT_THAT(ExpandInputs({}).status().message(), HasSubstr("no inputs"));
  absl::StatusOr<std::vector<std::string>> none = ExpandInputs({Path("texts/*.json")});
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(none.status().message(), HasSubstr(Path("texts/*.json")));
}

TEST_F(PrepareDataTest, InvalidUtf8IsRefusedNamingFileAndOffsetAndNothingIsLeft) {
  for (const std::string tokenizer : {"char", "bpe"}) {
    PrepareDataOptions options = Options("bad");
    const std::string bad = WriteFile(Path("bad.txt"), std::string(5000, 'a') + "\nb\xC0\xAF\n");
    options.inputs = {kGenesisPath, bad};
    options.tokenizer = tokenizer;
    options.vocab_size = tokenizer == "bpe" ? 400 : 0;
    SCOPED_TRACE(tokenizer);
    ExpectRefused(options, bad + ": not valid UTF-8 at byte 5002");
  }
}

TEST_F(PrepareDataTest, AnOutThatExistsAndIsNotEmptyIsRefused) {
  PrepareDataOptions options = Options("taken");
  fs::create_directories(options.out);
  WriteFile(options.out + "/keep.txt", "mine");
  ExpectRefused(options, "--out: ", absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ReadText(options.out + "/keep.txt"), "mine");

  fs::remove(options.out + "/keep.txt");  // an empty folder is filled
  absl::StatusOr<PrepareDataResult> result = PrepareData(options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(fs::exists(options.out + "/tokenizer"));
}

// A dataset initializer runs again after a crash or on a job's next attempt:
// a finished dataset of the same request is kept, not redone.
TEST_F(PrepareDataTest, WithReuseAFinishedDatasetOfTheSameRequestIsKeptAsItIs) {
  std::ostringstream progress;
  PrepareDataOptions options = Options("genesis");
  options.reuse = true;
  absl::StatusOr<PrepareDataResult> made = PrepareData(options);
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_FALSE(made->reused);
  const std::map<std::string, std::string> before = Contents(options.out);
  const auto shard_time = fs::last_write_time(options.out + "/shard-00000.bin");
  const nlohmann::json record = nlohmann::json::parse(before.at(kDatasetRecordFile));
  EXPECT_EQ(record["request"]["inputs"][0][0], kGenesisPath);
  EXPECT_EQ(record["request"]["inputs"][0][1], made->bytes);
  EXPECT_EQ(record["summary"]["tokens"], made->tokens);

  options.progress = &progress;
  options.threads = 1;  // not part of the request: the output is the same
  absl::StatusOr<PrepareDataResult> kept = PrepareData(options);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_TRUE(kept->reused);
  EXPECT_EQ(kept->tokens, made->tokens);
  EXPECT_EQ(kept->shards, made->shards);
  EXPECT_EQ(kept->vocab_size, made->vocab_size);
  EXPECT_EQ(kept->tokenizer_kind, "char");
  EXPECT_EQ(Contents(options.out), before);
  EXPECT_EQ(fs::last_write_time(options.out + "/shard-00000.bin"), shard_time);
  EXPECT_THAT(progress.str(), HasSubstr(absl::StrCat("kept ", options.out, ": it holds this dataset already (",
                                                     made->shards, " shards, ")));
  EXPECT_THAT(progress.str(), Not(HasSubstr("tokenizing")));
}

TEST_F(PrepareDataTest, WithReuseADatasetOfAnotherRequestOrAnyOtherFolderIsRefusedAndKept) {
  PrepareDataOptions options = Options("genesis");
  ASSERT_TRUE(PrepareData(options).ok());
  const std::map<std::string, std::string> before = Contents(options.out);
  options.reuse = true;
  options.tokenizer = "bpe";
  options.vocab_size = 400;
  ExpectRefused(options, "holds a dataset made from another request (tokenizer: \"char\" there, "
                         "\"bpe\" here)", absl::StatusCode::kFailedPrecondition);
  options = Options("genesis");
  options.reuse = true;
  const std::string more = WriteFile(Path("more.txt"), "And it was so.\n");
  options.inputs = {kGenesisPath, more};
  ExpectRefused(options, "(input 2: null there, [\"" + more + "\",15] here)",
                absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(Contents(options.out), before);

  options = Options("other");
  options.reuse = true;
  fs::create_directories(options.out);
  WriteFile(options.out + "/keep.txt", "mine");
  ExpectRefused(options, absl::StrCat("exists and holds no ", kDatasetRecordFile),
                absl::StatusCode::kFailedPrecondition);
  WriteFile(options.out + "/" + kDatasetRecordFile, "{\"request\": 1");
  ExpectRefused(options, "that is not a dataset record", absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ReadText(options.out + "/keep.txt"), "mine");
}

TEST_F(PrepareDataTest, AnEmptyCorpusIsRefused) {
  PrepareDataOptions options = Options("empty");
  options.inputs = {WriteFile(Path("empty.txt"), "")};
  ExpectRefused(options, "empty corpus");
  options.tokenizer = "bpe";
  options.vocab_size = 400;
  ExpectRefused(options, "empty corpus");
}

TEST_F(PrepareDataTest, BadFlagsAreRefusedNamingTheFlag) {
  PrepareDataOptions options = Options("out");
  options.tokenizer = "wordpiece";
  ExpectRefused(options, "--tokenizer: ");
  options.tokenizer = "bpe";
  ExpectRefused(options, "--vocab_size: ");
  options.vocab_size = 10;
  ExpectRefused(options, "--vocab_size: ");
  options = Options("out");
  options.vocab_size = 400;  // not with char
  ExpectRefused(options, "--vocab_size: ");
  options = Options("out");
  options.shard_tokens = 0;
  ExpectRefused(options, "--shard_tokens: ");
  options = Options("out");
  options.tokenizer_model = kGenesisPath;  // not a model
  ExpectRefused(options, "--tokenizer_model: " + kGenesisPath + ": not a SentencePiece model");
  options.tokenizer = "bpe";
  ExpectRefused(options, "--tokenizer_model: ");
  options = Options("out");
  options.text_field = "";
  ExpectRefused(options, "--text_field: ");
  options = Options("no-such-parent/out");
  ExpectRefused(options, "--out: ");
}

}  // namespace
}  // namespace paci
