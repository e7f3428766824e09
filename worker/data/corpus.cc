#include "worker/data/corpus.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace paci {
namespace {

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  const auto cannot_read = [&path](int error) {
    return absl::NotFoundError(absl::StrCat("data.corpus_path: cannot read ",
                                            path, ": ", std::strerror(error)));
  };
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) return cannot_read(errno);
  std::string text;
  char buffer[1 << 16];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file)) > 0) {
    text.append(buffer, n);
  }
  const int error = std::ferror(file) ? errno : 0;
  std::fclose(file);
  if (error != 0) return cannot_read(error);
  return text;
}

absl::Status ValidateOptions(const CorpusOptions& options) {
  if (options.path.empty()) {
    return absl::InvalidArgumentError(
        "data.corpus_path: must name a UTF-8 text file, got an empty path");
  }
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
  ASSIGN_OR_RETURN(const std::string text, ReadFile(options.path));
  absl::StatusOr<CharTokenizer> tokenizer = CharTokenizer::FromText(text);
  if (!tokenizer.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.corpus_path: ", options.path, ": ",
                     tokenizer.status().message()));
  }
  // Cannot fail: every character of `text` is in its own vocabulary.
  std::vector<int32_t> tokens = *tokenizer->Encode(text);

  const auto total = static_cast<int64_t>(tokens.size());
  const int64_t validation = std::llround(total * options.validation_fraction);
  const int64_t train = total - validation;
  const int64_t needed = int64_t{options.seq_len} + 2;
  if (train < needed || validation < needed) {
    return absl::InvalidArgumentError(absl::StrCat(
        "data.corpus_path: ", options.path, " is too small: model.seq_len ",
        options.seq_len, " needs at least ", needed,
        " tokens in each split, but its ", total, " tokens split into ", train,
        " for training and ", validation,
        " for validation (data.validation_fraction ",
        options.validation_fraction, ")"));
  }
  return Corpus(*std::move(tokenizer), std::move(tokens), train, options);
}

Corpus::Corpus(CharTokenizer tokenizer, std::vector<int32_t> tokens,
               int64_t train_tokens, const CorpusOptions& options)
    : tokenizer_(std::move(tokenizer)),
      tokens_(std::move(tokens)),
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

void Corpus::CopyWindow(int64_t start, int row,
                        std::vector<int32_t>* out) const {
  std::copy_n(tokens_.begin() + start, seq_len_ + 1,
              out->begin() + int64_t{row} * (seq_len_ + 1));
}

std::vector<int32_t> Corpus::TrainingWindows(uint64_t micro_batch_id) const {
  std::vector<int32_t> windows(int64_t{micro_batch_size_} * (seq_len_ + 1));
  const int64_t starts = train_tokens_ - seq_len_;
  const uint64_t batch_key = SplitMix64(SplitMix64(seed_) ^ micro_batch_id);
  for (int row = 0; row < micro_batch_size_; ++row) {
    const uint64_t hash = SplitMix64(batch_key ^ static_cast<uint64_t>(row));
    CopyWindow(ScaleToRange(hash, starts), row, &windows);
  }
  return windows;
}

std::vector<int32_t> Corpus::ValidationWindows(uint64_t eval_batch_id) const {
  std::vector<int32_t> windows(int64_t{micro_batch_size_} * (seq_len_ + 1));
  using uint128 = unsigned __int128;
  const auto starts = static_cast<uint128>(validation_tokens() - seq_len_);
  for (int row = 0; row < micro_batch_size_; ++row) {
    const uint128 k = uint128{eval_batch_id} * micro_batch_size_ + row;
    const auto offset =
        static_cast<int64_t>(k % starts * validation_stride_ % starts);
    CopyWindow(train_tokens_ + offset, row, &windows);
  }
  return windows;
}

}  // namespace paci
