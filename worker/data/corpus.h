#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/token_shards.h"
#include "worker/data/tokenizer.h"

namespace paci {

// Where the tokens are and how they are cut into samples. Each field names the
// JobSpec field it comes from. Exactly one of path and dataset is set.
struct CorpusOptions {
  std::string path;  // data.corpus_path: a UTF-8 text file
  // data.dataset: a folder written by `pacictl prepare-data`: `tokenizer`
  // (Tokenizer::Serialize's bytes) and shard-00000.bin, shard-00001.bin, ...
  std::string dataset;
  // data.tokenizer: with path "char" (or "") or "sentencepiece"; with
  // dataset "" or the kind the dataset was made with.
  std::string tokenizer;
  std::string tokenizer_model;  // data.tokenizer_model: with path and sentencepiece
  // data.validation_fraction: the tail of the token stream held out.
  double validation_fraction = 0.05;
  // data.validation_shards: with dataset, hold out its last N shards instead.
  int validation_shards = 0;
  uint64_t seed = 1;         // data.seed: fixes each micro-batch's windows
  int seq_len = 64;          // model.seq_len
  int micro_batch_size = 8;  // pipeline.micro_batch_size
  // A text corpus is read whole into memory: larger ones are refused (a
  // dataset of shards, `pacictl prepare-data`, has no such bound).
  uint64_t max_text_bytes = uint64_t{1} << 30;
};

// One token stream, split into a training head and a validation tail: a text
// file tokenized in memory (by character or SentencePiece), or the shards of a
// dataset folder, memory-mapped and read as if concatenated. Hands out the
// windows of a micro-batch as a pure function of its id, so every pipeline
// stage computes the same samples (stage 0 its inputs, the last stage its
// targets) without sending them around. The same tokens give the same windows
// from a text and from shards. Immutable after Load; thread-safe; move-only.
class Corpus {
 public:
  // Reads and tokenizes options.path, or opens and checks every shard of
  // options.dataset (blocking file I/O; a dataset is read once, not kept in
  // memory). Errors:
  //   NotFound "data.corpus_path: cannot read <path>: <reason>", or naming
  //   data.dataset, data.tokenizer_model or the shard that cannot be read;
  //   InvalidArgument "data.corpus_path: ..." when the file is not valid UTF-8
  //   or either split has fewer than seq_len + 2 tokens, "data.dataset: ..."
  //   for a folder without shards or too few tokens, naming data.tokenizer,
  //   data.tokenizer_model or data.validation_shards when one does not fit;
  //   FailedPrecondition "data.corpus_path: <path> is a FIFO, not a regular
  //   file" (a device, FIFO or socket) or "... is larger than N bytes"
  //   (max_text_bytes);
  //   DataLoss / FailedPrecondition naming a corrupt shard or one made by
  //   another tokenizer (token_shards.h);
  //   InvalidArgument naming model.seq_len, pipeline.micro_batch_size or
  //   data.validation_fraction when one is out of range.
  static absl::StatusOr<Corpus> Load(const CorpusOptions& options);

  const Tokenizer& tokenizer() const { return *tokenizer_; }
  int64_t train_tokens() const { return train_tokens_; }
  int64_t validation_tokens() const { return total_tokens_ - train_tokens_; }

  // micro_batch_size rows of seq_len + 1 consecutive token ids, row-major:
  // row r's inputs are [0, seq_len) and its targets [1, seq_len]. Row r starts
  // at an offset drawn uniformly over the training split from a splitmix64
  // hash of (seed, micro_batch_id, r): the same on every stage, machine and
  // run, independent of call order, and different for different ids.
  std::vector<int32_t> TrainingWindows(uint64_t micro_batch_id) const;

  // The same layout from the validation split. Row r of eval batch j is window
  // k = j * micro_batch_size + r, which starts at (k * stride) mod S, where S
  // is the number of window starts in the split and the stride is about 0.618 S
  // and coprime with S: any number of windows spreads evenly over the whole
  // split and none repeats before all S starts are used. Every evaluation thus
  // sees the same text.
  std::vector<int32_t> ValidationWindows(uint64_t eval_batch_id) const;

 private:
  // The tokens: in memory (a text) or in shards (a dataset), one of the two.
  struct Tokens {
    std::vector<int32_t> in_memory;
    std::vector<TokenShard> shards;
    std::vector<int64_t> shard_starts;  // shard i is [starts[i], starts[i + 1])

    int64_t size() const {
      return shards.empty() ? static_cast<int64_t>(in_memory.size()) : shard_starts.back();
    }
  };

  Corpus(std::shared_ptr<const Tokenizer> tokenizer, Tokens tokens,
         int64_t train_tokens, const CorpusOptions& options);

  static absl::StatusOr<Corpus> LoadText(const CorpusOptions& options);
  static absl::StatusOr<Corpus> LoadDataset(const CorpusOptions& options);
  // Checks that both sides of the split at `train` hold a window, and makes
  // the corpus.
  static absl::StatusOr<Corpus> Split(std::shared_ptr<const Tokenizer> tokenizer,
                                      Tokens tokens, int64_t train,
                                      const CorpusOptions& options);

  // Copies the window of seq_len + 1 tokens starting at `start` into row `row`.
  // With shards, adds the indexes of the shards it read to `touched`.
  void CopyWindow(int64_t start, int row, std::vector<int32_t>* out,
                  std::vector<int64_t>* touched) const;

  std::shared_ptr<const Tokenizer> tokenizer_;
  // Shards only: lets go of the pages of the shards `touched` (the indexes
  // CopyWindow added), so that what a micro-batch read does not stay in this
  // process' resident set: a fault maps the pages around it too (64 KiB, or
  // a whole large folio of the page cache, up to 2 MiB), which would add up
  // over a run to the size of the corpus.
  void ReleasePages(std::vector<int64_t> touched) const;

  Tokens tokens_;  // training head, then validation tail

  int64_t total_tokens_;
  int64_t train_tokens_;
  uint64_t seed_;
  int seq_len_;
  int micro_batch_size_;
  int64_t validation_stride_;
};

}  // namespace paci
