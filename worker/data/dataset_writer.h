#pragma once

// A dataset folder from text files: a tokenizer and token shards
// (token_shards.h), which a job names in data.dataset. `pacictl prepare-data`
// is its command line.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/tokenizer.h"

namespace paci {

struct DatasetOptions {
  // Files, folders (their regular files, sorted by name) and glob patterns;
  // the files are read in this order as one token stream. A file is text
  // (UTF-8), or JSONL when its name ends in .jsonl: one JSON object a line,
  // whose text_field is a document (followed by a newline in the stream;
  // blank lines are skipped). Either may be gzip-compressed (.gz).
  std::vector<std::string> inputs;
  std::string text_field = "text";  // JSONL: the field holding the text
  // JSONL: a line that is not an object with a string text_field is skipped
  // (and told to the progress) instead of failing the dataset.
  bool skip_bad_lines = false;
  std::string out;  // the dataset folder: must not exist, or be empty
  // An --out that already holds a complete dataset made from the same request
  // is kept as it is, and its summary returned (reused); one made from another
  // request is refused. The request is what shapes the tokens: the input files
  // with their sizes, and the options below; every dataset records it with
  // its summary in kDatasetRecordFile.
  bool reuse = false;
  // "char" (default: the characters of all inputs), "bpe" or "unigram" (a
  // SentencePiece model trained on the inputs, vocab_size pieces).
  std::string tokenizer;
  // A SentencePiece .model file to tokenize with instead (tokenizer empty).
  std::string tokenizer_model;
  // A Hugging Face tokenizer.json to tokenize with instead (tokenizer and
  // tokenizer_model empty). Its text is cut into chunks only where it encodes
  // alike (HfTokenizer::NextCut), so the ids are those of each whole file.
  std::string tokenizer_json;
  int vocab_size = 0;  // bpe and unigram only, and then required
  int64_t shard_tokens = int64_t{16} << 20;  // every shard but the last
  int threads = 0;  // 0: one per core
  // Text is tokenized in chunks of about this many bytes, cut after a
  // newline (where the tokenizer may cut); they fix the output, not the
  // thread count.
  size_t chunk_bytes = kTokenizeChunkBytes;
};

struct DatasetSummary {
  std::string tokenizer_kind;  // "char", "sentencepiece" or "tokenizer_json"
  int vocab_size = 0;
  int64_t shards = 0;
  int64_t tokens = 0;
  int64_t bytes = 0;  // of the input files
  int64_t skipped_lines = 0;  // bad JSONL lines, with skip_bad_lines
  bool reused = false;  // with reuse: the dataset was there already
};

// The file in a dataset folder that records how it was made (JSON: the
// request and the summary).
inline constexpr char kDatasetRecordFile[] = "prepared.json";

// What WriteDataset reports as it goes, on the thread that called it.
class DatasetProgress {
 public:
  virtual ~DatasetProgress() = default;
  // A pass over the inputs, `total_bytes` of text, begins: "vocabulary", "tokenizing".
  virtual void Start(const std::string& pass, int64_t total_bytes) = 0;
  // `bytes` of the inputs read so far in this pass, `tokens` written (often).
  virtual void Update(int64_t bytes, int64_t tokens) = 0;
  // The pass is over.
  virtual void Finish(int64_t bytes, int64_t tokens) = 0;
  // A step without a measure of its own ("training a bpe tokenizer ...").
  virtual void Say(const std::string& line) = 0;
};

// The input files, in order: each file as given, each folder's regular files
// sorted by name, each glob's matches (glob(3), sorted). InvalidArgument for
// no inputs, a glob that matches nothing or a name that is neither a file nor
// a folder, naming it.
absl::StatusOr<std::vector<std::string>> ExpandInputs(const std::vector<std::string>& inputs);

// Makes the dataset (blocking; uses `threads` threads), reporting to
// `progress` (nullptr: to no one). Builds it in a temporary folder beside
// `out` and renames it to `out` at the end: on any error nothing is left
// behind. Errors name the flag or the file:
//   InvalidArgument for bad options (--tokenizer, --vocab_size, ...), bad
//   inputs (see ExpandInputs), an empty corpus, text that is not valid UTF-8
//   (file and byte offset), a bad JSONL line ("<file>:<line>: <reason>",
//   unless skip_bad_lines), a --tokenizer_model that is not a model or a
//   --tokenizer_json tokenizers cannot load (naming it, with tokenizers' reason);
//   FailedPrecondition for an --out that exists and is not an empty folder
//   (with reuse: that holds no dataset, or one made from another request);
//   NotFound for a file that cannot be read; Internal for a write error.
absl::StatusOr<DatasetSummary> WriteDataset(const DatasetOptions& options,
                                            DatasetProgress* progress);

}  // namespace paci
