#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/char_tokenizer.h"

namespace paci {

// Where the text is and how it is cut into samples. Each field names the
// JobSpec field it comes from.
struct CorpusOptions {
  std::string path;  // data.corpus_path: a UTF-8 text file
  // data.validation_fraction: the tail of the token stream held out.
  double validation_fraction = 0.05;
  uint64_t seed = 1;         // data.seed: fixes each micro-batch's windows
  int seq_len = 64;          // model.seq_len
  int micro_batch_size = 8;  // pipeline.micro_batch_size
};

// A text file tokenized by character and split into a training head and a
// validation tail. Hands out the windows of a micro-batch as a pure function of
// its id, so every pipeline stage computes the same samples (stage 0 its
// inputs, the last stage its targets) without sending them around.
// Immutable after Load; thread-safe.
class Corpus {
 public:
  // Reads and tokenizes options.path (blocking file I/O). Errors:
  //   NotFound "data.corpus_path: cannot read <path>: <reason>";
  //   InvalidArgument "data.corpus_path: ..." when the file is not valid UTF-8
  //   or either split has fewer than seq_len + 2 tokens;
  //   InvalidArgument naming model.seq_len, pipeline.micro_batch_size or
  //   data.validation_fraction when one is out of range.
  static absl::StatusOr<Corpus> Load(const CorpusOptions& options);

  const CharTokenizer& tokenizer() const { return tokenizer_; }
  int64_t train_tokens() const { return train_tokens_; }
  int64_t validation_tokens() const {
    return static_cast<int64_t>(tokens_.size()) - train_tokens_;
  }

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
  Corpus(CharTokenizer tokenizer, std::vector<int32_t> tokens,
         int64_t train_tokens, const CorpusOptions& options);

  // Copies the window of seq_len + 1 tokens starting at `start` into row `row`.
  void CopyWindow(int64_t start, int row, std::vector<int32_t>* out) const;

  CharTokenizer tokenizer_;
  std::vector<int32_t> tokens_;  // training head, then validation tail
  int64_t train_tokens_;
  uint64_t seed_;
  int seq_len_;
  int micro_batch_size_;
  int64_t validation_stride_;
};

}  // namespace paci
