#pragma once

// Internal to the dataset writer (dataset_writer.h): how WriteDataset reads
// its input files, text or JSONL, plain or gzip-compressed, as chunks of one
// text stream. ExpandInputs, which lists those files, is declared in
// dataset_writer.h and defined in text_inputs.cc.

#include <zlib.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/data/tokenizer.h"

namespace paci::dataset_internal {

// A piece of one input file, cut where the tokenizer may cut (Tokenizer::NextCut).
struct Chunk {
  size_t file = 0;      // index into the input files
  uint64_t offset = 0;  // of text in that file's text
  std::string text;
  int64_t input_bytes = 0;  // of all the input files read when it was cut
};

// One input file opened with zlib, which reads gzip-compressed files (a name
// ending in .gz or not) and plain files alike. Not thread-safe.
class InputFile {
 public:
  static absl::StatusOr<InputFile> Open(const std::string& path);
  InputFile(InputFile&& other) noexcept;
  InputFile& operator=(InputFile&&) = delete;
  ~InputFile();

  // Appends up to `n` bytes to *out: how many, 0 at the end of the file.
  // NotFound naming the file on a read error (a truncated gzip stream too).
  absl::StatusOr<size_t> Read(size_t n, std::string* out);
  // The bytes of the file (compressed, for a .gz) read so far.
  int64_t offset() const { return gzoffset(file_); }

 private:
  InputFile(std::string path, gzFile file) : path_(std::move(path)), file_(file) {}

  std::string path_;
  gzFile file_;
};

// The longest line (a JSONL document) or run of text without a place to cut
// that an input may hold: past it the input is refused naming the file and
// where, so one endless line (a gzip bomb of one character) cannot take the
// memory of the process reading it.
inline constexpr size_t kMaxLineBytes = size_t{64} << 20;

// Whether `path` is read as JSONL rather than text.
bool IsJsonl(const std::string& path);

// Where a JSONL document's text comes from, and what to do with a bad line.
struct JsonlOptions {
  std::string text_field;
  bool skip_bad_lines = false;
  // Told of each line skipped ("<file>:<line>: <reason>"); may be empty.
  std::function<void(const std::string&)> skipped;
};

// The text of one input file: a text file as it is, or a JSONL file (a name
// ending in .jsonl or .jsonl.gz) as the text_field of each line's object, each
// document followed by a newline. Blank JSONL lines are no documents.
class InputText {
 public:
  static absl::StatusOr<InputText> Open(const std::string& path, const JsonlOptions& jsonl);

  // Appends about `n` bytes of text to *out (a whole document at a time for
  // JSONL): how many, 0 at the end of the file. A bad JSONL line is
  // InvalidArgument "<file>:<line>: <reason>" unless skip_bad_lines.
  absl::StatusOr<size_t> Read(size_t n, std::string* out);
  int64_t offset() const { return file_.offset(); }

 private:
  InputText(std::string path, InputFile file, const JsonlOptions* jsonl)
      : path_(std::move(path)), file_(std::move(file)), jsonl_(jsonl) {}

  // The next line of the file, without its newline; false at the end.
  absl::StatusOr<bool> NextLine(std::string* line);

  // Appends the document of one JSONL line (its text_field and a newline).
  absl::Status AppendDocument(std::string_view line, std::string* out);

  std::string path_;
  InputFile file_;
  const JsonlOptions* jsonl_;  // null: a text file
  std::string buffer_;         // read past the last line
  size_t scanned_ = 0;         // of buffer_, known to hold no newline
  int64_t line_number_ = 0;
};

// Reads the input files one after the other as chunks: each ends at the
// first cut of `tokenizer` (Tokenizer::NextCut; null: any newline) at or
// after chunk_bytes, or at the end of its file.
class ChunkReader {
 public:
  ChunkReader(const std::vector<std::string>& files, size_t chunk_bytes, JsonlOptions jsonl,
              const Tokenizer* tokenizer = nullptr)
      : files_(files), chunk_bytes_(chunk_bytes), jsonl_(std::move(jsonl)), tokenizer_(tokenizer) {}

  // The next chunk; false at the end of the last file. NotFound naming a file
  // that cannot be read, InvalidArgument naming a bad JSONL line.
  absl::StatusOr<bool> Next(Chunk* chunk);

 private:
  size_t Cut(size_t from) const;

  const std::vector<std::string>& files_;
  const size_t chunk_bytes_;
  const JsonlOptions jsonl_;
  const Tokenizer* const tokenizer_;  // null: cut at any newline
  size_t scanned_ = 0;  // of buffer_: where the next search for a cut starts
  std::optional<InputText> in_;
  bool at_end_ = false;
  size_t next_file_ = 0;
  size_t file_ = 0;
  uint64_t offset_ = 0;  // of buffer_ in the current file's text
  int64_t done_bytes_ = 0;  // the sizes of the files before the current one
  std::string buffer_;
};

}  // namespace paci::dataset_internal
