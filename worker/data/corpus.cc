#include "worker/data/corpus.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/read_file.h"
#include "common/status_macros.h"
#include "worker/data/char_tokenizer.h"
#include "worker/data/sentencepiece_tokenizer.h"

namespace paci {
namespace {

// `status` with "<field>: " in front of its message, its code kept.
absl::Status Prefixed(const char* field, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(field, ": ", status.message()));
}

// The bytes of the regular file `path`, at most `max_bytes` (ReadFileToString),
// its errors with "<field>: " in front: NotFound for a file that cannot be read
// (a directory too), FailedPrecondition for a device, FIFO or socket, and for a
// file over `max_bytes`, which points to a dataset of shards.
absl::StatusOr<std::string> ReadFile(const std::string& path, const char* field,
                                     uint64_t max_bytes) {
  absl::StatusOr<std::string> text = ReadFileToString(path, max_bytes);
  if (absl::IsResourceExhausted(text.status())) {
    return absl::FailedPreconditionError(absl::StrCat(
        field, ": ", text.status().message(),
        ": a text corpus is read whole; make a dataset of shards with "
        "`pacictl prepare-data` and name it in data.dataset"));
  }
  if (!text.ok()) return Prefixed(field, text.status());
  return text;
}

absl::Status ValidateSource(const CorpusOptions& options) {
  if (options.path.empty() == options.dataset.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.corpus_path: exactly one of data.corpus_path (a UTF-8 text file) and "
        "data.dataset (a folder made by prepare-data) must be set, got ",
        options.path.empty() ? "neither" : "both"));
  }
  if (options.tokenizer != "" && options.tokenizer != "char" &&
      options.tokenizer != "sentencepiece") {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.tokenizer: must be \"char\" or \"sentencepiece\", got \"", options.tokenizer,
        "\""));
  }
  const bool needs_model = !options.path.empty() && options.tokenizer == "sentencepiece";
  if (needs_model != !options.tokenizer_model.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.tokenizer_model: must name a SentencePiece .model file exactly when "
        "data.corpus_path is tokenized by data.tokenizer \"sentencepiece\", got \"",
        options.tokenizer_model, "\""));
  }
  if (options.validation_shards < 0 ||
      (options.validation_shards > 0 && options.dataset.empty())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.validation_shards: must be at least 0, and 0 without data.dataset, got ",
        options.validation_shards));
  }
  return absl::OkStatus();
}

absl::Status ValidateOptions(const CorpusOptions& options) {
  RETURN_IF_ERROR(ValidateSource(options));
  if (options.seq_len < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model.seq_len: must be at least 1, got ", options.seq_len));
  }
  if (options.micro_batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("pipeline.micro_batch_size: must be at least 1, got ",
                     options.micro_batch_size));
  }
  // Written so that NaN fails too.
  if (!(options.validation_fraction > 0 && options.validation_fraction < 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.validation_fraction: must be between 0 and 1 "
                     "(exclusive), got ",
                     options.validation_fraction));
  }
  return absl::OkStatus();
}

// The tokenizer of a text corpus: its characters', or the SentencePiece model.
absl::StatusOr<std::unique_ptr<Tokenizer>> TextTokenizer(const CorpusOptions& options,
                                                         std::string_view text) {
  if (options.tokenizer == "sentencepiece") {
    absl::StatusOr<SentencePieceTokenizer> model =
        SentencePieceTokenizer::Load(options.tokenizer_model);
    if (!model.ok()) return Prefixed("data.tokenizer_model", model.status());
    if (const size_t bad = FindInvalidUtf8(text); bad != text.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data.corpus_path: ", options.path, ": corpus is not valid UTF-8 at byte ", bad));
    }
    return std::make_unique<SentencePieceTokenizer>(*std::move(model));
  }
  absl::StatusOr<CharTokenizer> tokenizer = CharTokenizer::FromText(text);
  if (!tokenizer.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.corpus_path: ", options.path, ": ", tokenizer.status().message()));
  }
  return std::make_unique<CharTokenizer>(*std::move(tokenizer));
}

// The shard files of `dir`, shard-00000.bin first. InvalidArgument when there
// are none, DataLoss naming the first one missing from the sequence.
absl::StatusOr<std::vector<std::string>> ListShards(const std::string& dir) {
  std::vector<int64_t> indices;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    int64_t index;
    if (absl::StartsWith(name, "shard-") && absl::EndsWith(name, ".bin") &&
        absl::SimpleAtoi(name.substr(6, name.size() - 10), &index) && index >= 0) {
      indices.push_back(index);
    }
  }
  if (error) {
    return absl::NotFoundError(
        absl::StrCat("data.dataset: cannot list ", dir, ": ", error.message()));
  }
  if (indices.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.dataset: ", dir, " holds no token shards (shard-00000.bin, ...)"));
  }
  std::sort(indices.begin(), indices.end());
  std::vector<std::string> paths;
  for (int64_t i = 0; i < static_cast<int64_t>(indices.size()); ++i) {
    const std::string path = TokenShardPath(dir, i);
    if (indices[i] != i) {
      return absl::DataLossError(absl::StrCat("data.dataset: ", path, " is missing"));
    }
    paths.push_back(path);
  }
  return paths;
}

uint64_t SplitMix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// floor(hash * n / 2^64): uniform over [0, n) up to a bias of n / 2^64.
int64_t ScaleToRange(uint64_t hash, int64_t n) {
  return static_cast<int64_t>(
      (static_cast<unsigned __int128>(hash) * static_cast<uint64_t>(n)) >> 64);
}

}  // namespace

absl::StatusOr<Corpus> Corpus::Load(const CorpusOptions& options) {
  RETURN_IF_ERROR(ValidateOptions(options));
  return options.dataset.empty() ? LoadText(options) : LoadDataset(options);
}

absl::StatusOr<Corpus> Corpus::LoadText(const CorpusOptions& options) {
  ASSIGN_OR_RETURN(const std::string text, ReadFile(options.path, "data.corpus_path", options.max_text_bytes));
  ASSIGN_OR_RETURN(std::shared_ptr<const Tokenizer> tokenizer, TextTokenizer(options, text));
  // Chunk by chunk, as prepare-data does: the same text, the same tokens.
  Tokens tokens;
  for (size_t begin = 0, end; begin < text.size(); begin = end) {
    end = ChunkEnd(text, begin, kTokenizeChunkBytes);
    ASSIGN_OR_RETURN(const std::vector<int32_t> ids,
                     tokenizer->Encode(std::string_view(text).substr(begin, end - begin)));
    tokens.in_memory.insert(tokens.in_memory.end(), ids.begin(), ids.end());
  }
  const int64_t total = tokens.size();
  const int64_t train = total - std::llround(total * options.validation_fraction);
  return Split(std::move(tokenizer), std::move(tokens), train, options);
}

absl::StatusOr<Corpus> Corpus::LoadDataset(const CorpusOptions& options) {
  const std::string tokenizer_path = options.dataset + "/" + kDatasetTokenizerFile;
  ASSIGN_OR_RETURN(const std::string serialized, ReadFile(tokenizer_path, "data.dataset", options.max_text_bytes));
  absl::StatusOr<std::unique_ptr<Tokenizer>> parsed =
      ParseTokenizer(serialized, tokenizer_path);
  if (!parsed.ok()) return Prefixed("data.dataset", parsed.status());
  std::shared_ptr<const Tokenizer> tokenizer = *std::move(parsed);
  if (!options.tokenizer.empty() && options.tokenizer != tokenizer->kind()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.tokenizer: \"", options.tokenizer, "\", but the dataset ", options.dataset,
        " was made with \"", tokenizer->kind(), "\""));
  }
  ASSIGN_OR_RETURN(const std::vector<std::string> paths, ListShards(options.dataset));
  const std::string id = tokenizer->Id();
  Tokens tokens;
  tokens.shard_starts.push_back(0);
  for (const std::string& path : paths) {
    absl::StatusOr<TokenShard> shard = TokenShard::Open(path, id, tokenizer->vocab_size());
    if (!shard.ok()) return Prefixed("data.dataset", shard.status());
    tokens.shard_starts.push_back(tokens.shard_starts.back() + shard->size());
    tokens.shards.push_back(*std::move(shard));
  }
  const int64_t total = tokens.size();
  int64_t train = total - std::llround(total * options.validation_fraction);
  if (options.validation_shards > 0) {
    const auto shards = static_cast<int>(paths.size());
    if (options.validation_shards >= shards) {
      return absl::InvalidArgumentError(absl::StrCat(
          "data.validation_shards: must be less than the ", shards, " shards of ",
          options.dataset, ", got ", options.validation_shards));
    }
    train = tokens.shard_starts[shards - options.validation_shards];
  }
  return Split(std::move(tokenizer), std::move(tokens), train, options);
}

absl::StatusOr<Corpus> Corpus::Split(std::shared_ptr<const Tokenizer> tokenizer, Tokens tokens,
                                     int64_t train, const CorpusOptions& options) {
  const int64_t total = tokens.size();
  const int64_t validation = total - train;
  const int64_t needed = int64_t{options.seq_len} + 2;
  if (train < needed || validation < needed) {
    const std::string source = options.dataset.empty()
                                   ? "data.corpus_path: " + options.path
                                   : "data.dataset: " + options.dataset;
    const std::string held_out =
        options.validation_shards > 0
            ? absl::StrCat("data.validation_shards ", options.validation_shards)
            : absl::StrCat("data.validation_fraction ", options.validation_fraction);
    return absl::InvalidArgumentError(absl::StrCat(
        source, " is too small: model.seq_len ", options.seq_len, " needs at least ", needed,
        " tokens in each split, but its ", total, " tokens split into ", train,
        " for training and ", validation, " for validation (", held_out, ")"));
  }
  return Corpus(std::move(tokenizer), std::move(tokens), train, options);
}

Corpus::Corpus(std::shared_ptr<const Tokenizer> tokenizer, Tokens tokens,
               int64_t train_tokens, const CorpusOptions& options)
    : tokenizer_(std::move(tokenizer)),
      tokens_(std::move(tokens)),
      total_tokens_(tokens_.size()),
      train_tokens_(train_tokens),
      seed_(options.seed),
      seq_len_(options.seq_len),
      micro_batch_size_(options.micro_batch_size) {
  const int64_t starts = validation_tokens() - seq_len_;
  // Golden-ratio stride: consecutive windows land far apart and any prefix of
  // them is spread evenly (three-gap theorem). gcd(starts - 1, starts) == 1
  // bounds the search.
  validation_stride_ =
      std::max<int64_t>(1, std::llround(starts * 0.6180339887));
  while (std::gcd(validation_stride_, starts) != 1) ++validation_stride_;
}

void Corpus::CopyWindow(int64_t start, int row, std::vector<int32_t>* out,
                        std::vector<int64_t>* touched) const {
  int32_t* to = out->data() + int64_t{row} * (seq_len_ + 1);
  int64_t left = seq_len_ + 1;
  if (tokens_.shards.empty()) {
    std::copy_n(tokens_.in_memory.begin() + start, left, to);
    return;
  }
  // A window may run across shards.
  const std::vector<int64_t>& starts = tokens_.shard_starts;
  auto shard = std::upper_bound(starts.begin(), starts.end(), start) - starts.begin() - 1;
  while (left > 0) {
    const int64_t begin = start - starts[shard];
    const int64_t n = std::min(left, starts[shard + 1] - start);
    tokens_.shards[shard].Copy(begin, n, to);
    touched->push_back(shard);
    to += n;
    start += n;
    left -= n;
    ++shard;
  }
}

void Corpus::ReleasePages(std::vector<int64_t> touched) const {
  std::sort(touched.begin(), touched.end());
  touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
  for (const int64_t shard : touched) tokens_.shards[shard].ReleasePages();
}

std::vector<int32_t> Corpus::TrainingWindows(uint64_t micro_batch_id) const {
  std::vector<int32_t> windows(int64_t{micro_batch_size_} * (seq_len_ + 1));
  std::vector<int64_t> touched;
  const int64_t starts = train_tokens_ - seq_len_;
  const uint64_t batch_key = SplitMix64(SplitMix64(seed_) ^ micro_batch_id);
  for (int row = 0; row < micro_batch_size_; ++row) {
    const uint64_t hash = SplitMix64(batch_key ^ static_cast<uint64_t>(row));
    CopyWindow(ScaleToRange(hash, starts), row, &windows, &touched);
  }
  ReleasePages(std::move(touched));
  return windows;
}

std::vector<int32_t> Corpus::ValidationWindows(uint64_t eval_batch_id) const {
  std::vector<int32_t> windows(int64_t{micro_batch_size_} * (seq_len_ + 1));
  std::vector<int64_t> touched;
  using uint128 = unsigned __int128;
  const auto starts = static_cast<uint128>(validation_tokens() - seq_len_);
  for (int row = 0; row < micro_batch_size_; ++row) {
    const uint128 k = uint128{eval_batch_id} * micro_batch_size_ + row;
    const auto offset =
        static_cast<int64_t>(k % starts * validation_stride_ % starts);
    CopyWindow(train_tokens_ + offset, row, &windows, &touched);
  }
  ReleasePages(std::move(touched));
  return windows;
}

}  // namespace paci
