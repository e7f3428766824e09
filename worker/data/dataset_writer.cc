#include "worker/data/dataset_writer.h"

#include <glob.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "common/atomic_file.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "worker/data/char_tokenizer.h"
#include "worker/data/hf_tokenizer.h"
#include "worker/data/sentencepiece_tokenizer.h"
#include "worker/data/token_shards.h"

namespace paci {
namespace {

namespace fs = std::filesystem;

// The chunks read at a time: two per thread, so that a thread that finishes
// early takes another.
size_t BatchSize(int threads) { return 2 * static_cast<size_t>(threads); }

// A piece of one input file, cut where the tokenizer may cut (Tokenizer::NextCut).
struct Chunk {
  size_t file = 0;      // index into the input files
  uint64_t offset = 0;  // of text in that file's text
  std::string text;
  int64_t input_bytes = 0;  // of all the input files read when it was cut
};

absl::Status ValidateOptions(const DatasetOptions& options) {
  const std::string& kind = options.tokenizer;
  if (kind != "" && kind != "char" && kind != "bpe" && kind != "unigram") {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tokenizer: must be char, bpe or unigram, got \"", kind, "\""));
  }
  if (!options.tokenizer_model.empty() && !kind.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tokenizer_model: tokenizes with that model; leave out --tokenizer (got \"", kind,
        "\")"));
  }
  if (!options.tokenizer_json.empty() && (!kind.empty() || !options.tokenizer_model.empty())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tokenizer_json: tokenizes with that tokenizer.json; leave out --tokenizer and "
        "--tokenizer_model (got \"", kind, "\" and \"", options.tokenizer_model, "\")"));
  }
  if (options.text_field.empty()) {
    return absl::InvalidArgumentError("--text_field: must name the field of a .jsonl line");
  }
  const bool trains = kind == "bpe" || kind == "unigram";
  if (trains != (options.vocab_size != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--vocab_size: required with --tokenizer=bpe or unigram, and only then; got ",
        options.vocab_size, " with --tokenizer=\"", kind, "\""));
  }
  if (options.shard_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--shard_tokens: must be at least 1, got ", options.shard_tokens));
  }
  if (options.out.empty()) return absl::InvalidArgumentError("--out: must name the dataset folder");
  if (options.chunk_bytes < 1 || options.threads < 0) {
    return absl::InvalidArgumentError("chunk_bytes and threads: must be positive");
  }
  return absl::OkStatus();
}

// Appends the regular files of `dir`, sorted by name.
absl::Status AppendFolder(const std::string& dir, std::vector<std::string>* files) {
  std::vector<std::string> found;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    if (entry.is_regular_file()) found.push_back(entry.path().string());
  }
  if (error) {
    return absl::NotFoundError(absl::StrCat(dir, ": cannot list: ", error.message()));
  }
  std::sort(found.begin(), found.end());
  files->insert(files->end(), found.begin(), found.end());
  return absl::OkStatus();
}

// The paths `pattern` matches, sorted; none when it matches nothing.
std::vector<std::string> Glob(const std::string& pattern) {
  glob_t matches;
  std::vector<std::string> paths;
  if (glob(pattern.c_str(), 0, nullptr, &matches) == 0) {
    paths.assign(matches.gl_pathv, matches.gl_pathv + matches.gl_pathc);
  }
  globfree(&matches);
  return paths;
}

// The absolute --out, checked: its parent exists and it does not, or is an
// empty folder.
absl::StatusOr<fs::path> CheckOut(const std::string& out) {
  fs::path path = fs::absolute(out).lexically_normal();
  if (path.filename().empty()) path = path.parent_path();  // "dir/"
  std::error_code error;
  if (!fs::is_directory(path.parent_path(), error)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--out: ", out, ": its parent folder ", path.parent_path().string(), " does not exist"));
  }
  if (fs::exists(path, error) && !(fs::is_directory(path) && fs::is_empty(path, error))) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--out: ", out, " exists and is not an empty folder; nothing was written"));
  }
  return path;
}

// A write error is Internal here, as WriteDataset documents it, and names --out.
absl::Status AsInternal(const absl::Status& status) {
  return status.ok() ? status : absl::InternalError(absl::StrCat("--out: ", status.message()));
}

// One input file opened with zlib, which reads gzip-compressed files (a name
// ending in .gz or not) and plain files alike. Not thread-safe.
class InputFile {
 public:
  static absl::StatusOr<InputFile> Open(const std::string& path) {
    gzFile file = gzopen(path.c_str(), "rb");
    if (file == nullptr) {
      return absl::NotFoundError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
    }
    gzbuffer(file, 1 << 17);
    return InputFile(path, file);
  }
  InputFile(InputFile&& other) noexcept
      : path_(std::move(other.path_)), file_(std::exchange(other.file_, nullptr)) {}
  InputFile& operator=(InputFile&&) = delete;
  ~InputFile() {
    if (file_ != nullptr) gzclose(file_);
  }

  // Appends up to `n` bytes to *out: how many, 0 at the end of the file.
  // NotFound naming the file on a read error (a truncated gzip stream too).
  absl::StatusOr<size_t> Read(size_t n, std::string* out) {
    const size_t size = out->size();
    out->resize(size + n);
    const int read = gzread(file_, out->data() + size, static_cast<unsigned>(n));
    int code = Z_OK;
    const char* error = gzerror(file_, &code);
    // A gzip stream cut short reads as its end, with Z_BUF_ERROR kept for gzerror.
    if (read < 0 || (read == 0 && code != Z_OK)) {
      out->resize(size);
      return absl::NotFoundError(absl::StrCat("cannot read ", path_, ": ", error,
                                              code == Z_BUF_ERROR ? " (truncated?)" : ""));
    }
    out->resize(size + static_cast<size_t>(read));
    return static_cast<size_t>(read);
  }
  // The bytes of the file (compressed, for a .gz) read so far.
  int64_t offset() const { return gzoffset(file_); }

 private:
  InputFile(std::string path, gzFile file) : path_(std::move(path)), file_(file) {}

  std::string path_;
  gzFile file_;
};

// Whether `path` is read as JSONL rather than text.
bool IsJsonl(const std::string& path) {
  return absl::EndsWith(path, ".jsonl") || absl::EndsWith(path, ".jsonl.gz");
}

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
  static absl::StatusOr<InputText> Open(const std::string& path, const JsonlOptions& jsonl) {
    ASSIGN_OR_RETURN(InputFile file, InputFile::Open(path));
    return InputText(path, std::move(file), IsJsonl(path) ? &jsonl : nullptr);
  }

  // Appends about `n` bytes of text to *out (a whole document at a time for
  // JSONL): how many, 0 at the end of the file. A bad JSONL line is
  // InvalidArgument "<file>:<line>: <reason>" unless skip_bad_lines.
  absl::StatusOr<size_t> Read(size_t n, std::string* out) {
    if (jsonl_ == nullptr) return file_.Read(n, out);
    const size_t size = out->size();
    std::string line;
    while (out->size() - size < n) {
      ASSIGN_OR_RETURN(const bool more, NextLine(&line));
      if (!more) break;
      RETURN_IF_ERROR(AppendDocument(line, out));
    }
    return out->size() - size;
  }
  int64_t offset() const { return file_.offset(); }

 private:
  InputText(std::string path, InputFile file, const JsonlOptions* jsonl)
      : path_(std::move(path)), file_(std::move(file)), jsonl_(jsonl) {}

  // The next line of the file, without its newline; false at the end.
  absl::StatusOr<bool> NextLine(std::string* line) {
    size_t newline;
    while ((newline = buffer_.find('\n', scanned_)) == std::string::npos) {
      scanned_ = buffer_.size();
      ASSIGN_OR_RETURN(const size_t read, file_.Read(size_t{1} << 16, &buffer_));
      if (read == 0) break;
    }
    if (newline == std::string::npos && buffer_.empty()) return false;
    const size_t end = newline == std::string::npos ? buffer_.size() : newline;
    line->assign(buffer_, 0, end);
    buffer_.erase(0, std::min(buffer_.size(), end + 1));
    scanned_ = 0;
    ++line_number_;
    return true;
  }

  // Appends the document of one JSONL line (its text_field and a newline).
  absl::Status AppendDocument(std::string_view line, std::string* out) {
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) return absl::OkStatus();
    const nlohmann::json document =
        nlohmann::json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
    std::string problem;
    if (document.is_discarded()) {
      problem = "not JSON";
    } else if (!document.is_object()) {
      problem = "not a JSON object";
    } else if (const auto text = document.find(jsonl_->text_field); text == document.end()) {
      problem = absl::StrCat("has no field \"", jsonl_->text_field, "\" (--text_field)");
    } else if (!text->is_string()) {
      problem = absl::StrCat("field \"", jsonl_->text_field, "\" is not a string");
    } else {
      const std::string& value = text->get_ref<const std::string&>();
      absl::StrAppend(out, value, "\n");
      return absl::OkStatus();
    }
    const std::string where = absl::StrCat(path_, ":", line_number_, ": ", problem);
    if (!jsonl_->skip_bad_lines) {
      return absl::InvalidArgumentError(absl::StrCat(where, " (--skip_bad_lines goes on)"));
    }
    if (jsonl_->skipped) jsonl_->skipped(where);
    return absl::OkStatus();
  }

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
  absl::StatusOr<bool> Next(Chunk* chunk) {
    while (true) {
      if (!in_) {
        if (next_file_ == files_.size()) return false;
        ASSIGN_OR_RETURN(InputText in, InputText::Open(files_[next_file_], jsonl_));
        in_.emplace(std::move(in));
        file_ = next_file_++;
        offset_ = 0;
        at_end_ = false;
        buffer_.clear();
        scanned_ = 0;
      }
      const size_t from = std::max(chunk_bytes_, scanned_);
      const size_t cut = buffer_.size() > chunk_bytes_ ? Cut(from) : std::string::npos;
      if (cut != std::string::npos || (at_end_ && !buffer_.empty())) {
        const size_t end = cut != std::string::npos ? cut : buffer_.size();
        *chunk = {file_, offset_, buffer_.substr(0, end), done_bytes_ + in_->offset()};
        buffer_.erase(0, end);
        offset_ += end;
        scanned_ = 0;
        return true;
      }
      if (buffer_.size() > from) {
        // The next search starts at the last newline: its cut may depend on
        // what is read next.
        const size_t last = std::string_view(buffer_).substr(from).rfind('\n');
        scanned_ = last == std::string::npos ? buffer_.size() : from + last;
      }
      if (at_end_) {
        std::error_code error;
        done_bytes_ += static_cast<int64_t>(fs::file_size(files_[file_], error));
        in_.reset();
        continue;
      }
      ASSIGN_OR_RETURN(const size_t read, in_->Read(chunk_bytes_, &buffer_));
      at_end_ = read == 0;
    }
  }

 private:
  size_t Cut(size_t from) const {
    if (tokenizer_ != nullptr) return tokenizer_->NextCut(buffer_, from);
    const size_t newline = buffer_.find('\n', from);
    return newline == std::string::npos ? newline : newline + 1;
  }

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

// The JSONL handling the options ask for, telling `skipped` of each line skipped.
JsonlOptions Jsonl(const DatasetOptions& options,
                   std::function<void(const std::string&)> skipped) {
  return {options.text_field, options.skip_bad_lines, std::move(skipped)};
}

// The skipped lines told one by one; past them, only their number (in the
// summary's skipped_lines).
constexpr int64_t kSkippedLinesTold = 10;

// What a writer without a progress sink reports to.
class NoProgress final : public DatasetProgress {
 public:
  void Start(const std::string&, int64_t) override {}
  void Update(int64_t, int64_t) override {}
  void Finish(int64_t, int64_t) override {}
  void Say(const std::string&) override {}
};

// Calls work(i) for every i in [0, n) on `threads` threads (blocking). The
// error of the lowest i that failed, so that it does not depend on timing.
absl::Status RunParallel(size_t n, int threads, const std::function<absl::Status(size_t)>& work) {
  std::vector<absl::Status> statuses(n);
  std::atomic<size_t> next{0};
  const auto run = [&] {
    for (size_t i; (i = next.fetch_add(1)) < n;) statuses[i] = work(i);
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(run);
  run();
  for (std::thread& thread : pool) thread.join();
  for (const absl::Status& status : statuses) RETURN_IF_ERROR(status);
  return absl::OkStatus();
}

// Reads the inputs chunk by chunk (cut where `tokenizer` may cut; null: at
// any newline), a batch of chunks at a time: work(chunk, slot) runs on
// `threads` threads for the chunks of a batch, then done(batch) on the calling
// thread, batch after batch in input order.
absl::Status ForEachBatch(const std::vector<std::string>& files, const JsonlOptions& jsonl,
                          size_t chunk_bytes, int threads, const Tokenizer* tokenizer,
                          const std::function<absl::Status(const Chunk&, size_t)>& work,
                          const std::function<absl::Status(const std::vector<Chunk>&)>& done) {
  ChunkReader reader(files, chunk_bytes, jsonl, tokenizer);
  const size_t batch_size = BatchSize(threads);
  std::vector<Chunk> batch;
  for (bool more = true; more;) {
    batch.clear();
    while (batch.size() < batch_size) {
      Chunk chunk;
      ASSIGN_OR_RETURN(more, reader.Next(&chunk));
      if (!more) break;
      batch.push_back(std::move(chunk));
    }
    if (batch.empty()) break;
    RETURN_IF_ERROR(
        RunParallel(batch.size(), threads, [&](size_t i) { return work(batch[i], i); }));
    RETURN_IF_ERROR(done(batch));
  }
  return absl::OkStatus();
}

// InvalidArgument "<file>: not valid UTF-8 at byte <offset in the file>".
absl::Status CheckUtf8(const Chunk& chunk, const std::vector<std::string>& files) {
  const size_t bad = FindInvalidUtf8(chunk.text);
  if (bad == chunk.text.size()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(files[chunk.file], ": not valid UTF-8 at byte ",
                                                 chunk.offset + bad));
}

// The character tokenizer of all the inputs: one pass over them.
absl::StatusOr<CharTokenizer> CharVocabulary(const std::vector<std::string>& files,
                                             int64_t total_bytes, const DatasetOptions& options,
                                             int threads,
                                             DatasetProgress* progress) {
  std::vector<std::vector<char32_t>> found(BatchSize(threads));  // per chunk of a batch
  std::vector<bool> seen(0x110000);
  progress->Start("vocabulary", total_bytes);
  const JsonlOptions jsonl = Jsonl(options, nullptr);  // the tokenizing pass tells of skipped lines
  RETURN_IF_ERROR(ForEachBatch(
      files, jsonl, options.chunk_bytes, threads, /*tokenizer=*/nullptr,
      [&](const Chunk& chunk, size_t slot) {
        RETURN_IF_ERROR(CheckUtf8(chunk, files));
        // Cannot fail: the chunk is valid UTF-8.
        found[slot] = CharTokenizer::FromText(chunk.text)->code_points();
        return absl::OkStatus();
      },
      [&](const std::vector<Chunk>& batch) {
        for (size_t i = 0; i < batch.size(); ++i) {
          for (char32_t c : found[i]) seen[c] = true;
        }
        progress->Update(std::min(total_bytes, batch.back().input_bytes), 0);
        return absl::OkStatus();
      }));
  progress->Finish(total_bytes, 0);
  std::vector<char32_t> code_points;
  for (char32_t c = 0; c < seen.size(); ++c) {
    if (seen[c]) code_points.push_back(c);
  }
  return CharTokenizer::FromCodePoints(std::move(code_points));
}

// The inputs as files SentencePiece's trainer reads: the files themselves when
// all are text, else one file in `scratch_dir` of all their text.
absl::StatusOr<std::vector<std::string>> PlainTextFiles(const std::vector<std::string>& files,
                                                        const DatasetOptions& options,
                                                        const std::string& scratch_dir) {
  const bool plain = std::all_of(files.begin(), files.end(), [](const std::string& file) {
    return !IsJsonl(file) && !absl::EndsWith(file, ".gz");
  });
  if (plain) return files;
  const std::string text_file = scratch_dir + "/training-text";
  std::ofstream out(text_file, std::ios::binary);
  ChunkReader reader(files, options.chunk_bytes, Jsonl(options, nullptr));
  Chunk chunk;
  while (true) {
    ASSIGN_OR_RETURN(const bool more, reader.Next(&chunk));
    if (!more) break;
    out << chunk.text;
  }
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("--out: cannot write ", text_file));
  return std::vector<std::string>{text_file};
}

// The tokenizer the options ask for: the inputs' characters, a SentencePiece
// model trained on them (text extracted into `scratch_dir` when the inputs are
// compressed or JSONL), or one loaded from --tokenizer_model or
// --tokenizer_json.
absl::StatusOr<std::unique_ptr<Tokenizer>> MakeTokenizer(const std::vector<std::string>& files,
                                                         int64_t total_bytes,
                                                         const DatasetOptions& options,
                                                         int threads,
                                                         const std::string& scratch_dir,
                                                         DatasetProgress* progress) {
  if (!options.tokenizer_model.empty()) {
    absl::StatusOr<SentencePieceTokenizer> model =
        SentencePieceTokenizer::Load(options.tokenizer_model);
    if (!model.ok()) {
      return absl::Status(model.status().code(),
                          absl::StrCat("--tokenizer_model: ", model.status().message()));
    }
    return std::make_unique<SentencePieceTokenizer>(*std::move(model));
  }
  if (!options.tokenizer_json.empty()) {
    absl::StatusOr<HfTokenizer> loaded = HfTokenizer::Load(options.tokenizer_json);
    if (!loaded.ok()) {
      return absl::Status(loaded.status().code(),
                          absl::StrCat("--tokenizer_json: ", loaded.status().message()));
    }
    return std::make_unique<HfTokenizer>(*std::move(loaded));
  }
  if (options.tokenizer.empty() || options.tokenizer == "char") {
    ASSIGN_OR_RETURN(CharTokenizer tokenizer,
                     CharVocabulary(files, total_bytes, options, threads, progress));
    return std::make_unique<CharTokenizer>(std::move(tokenizer));
  }
  SentencePieceTrainingOptions training;
  training.model_type = options.tokenizer;
  training.vocab_size = options.vocab_size;
  ASSIGN_OR_RETURN(const std::vector<std::string> text_files,
                   PlainTextFiles(files, options, scratch_dir));
  progress->Say(absl::StrCat("training a ", options.tokenizer, " tokenizer of ",
                              options.vocab_size, " tokens"));
  absl::StatusOr<SentencePieceTokenizer> trained =
      SentencePieceTokenizer::Train(text_files, training);
  if (text_files != files) fs::remove(text_files.front());
  if (!trained.ok()) {
    if (absl::StartsWith(trained.status().message(), "vocab_size")) {
      return absl::InvalidArgumentError(absl::StrCat("--", trained.status().message()));
    }
    return trained.status();
  }
  return std::make_unique<SentencePieceTokenizer>(*std::move(trained));
}

// Cuts one token stream into shards of shard_tokens tokens (the last one
// shorter) in a folder. Not thread-safe.
class ShardedTokenWriter {
 public:
  ShardedTokenWriter(std::string dir, const Tokenizer& tokenizer, int64_t shard_tokens)
      : dir_(std::move(dir)),
        tokenizer_id_(tokenizer.Id()),
        vocab_size_(tokenizer.vocab_size()),
        shard_tokens_(shard_tokens) {}

  absl::Status Append(absl::Span<const int32_t> ids) {
    while (!ids.empty()) {
      if (!writer_) {
        ASSIGN_OR_RETURN(TokenShardWriter writer,
                         TokenShardWriter::Create(TokenShardPath(dir_, shards_), tokenizer_id_,
                                                  vocab_size_));
        writer_.emplace(std::move(writer));
        ++shards_;
      }
      const size_t n = std::min<size_t>(ids.size(), shard_tokens_ - writer_->tokens());
      RETURN_IF_ERROR(writer_->Append(ids.subspan(0, n)));
      tokens_ += static_cast<int64_t>(n);
      ids.remove_prefix(n);
      if (writer_->tokens() == shard_tokens_) RETURN_IF_ERROR(Close());
    }
    return absl::OkStatus();
  }

  // Finishes the last shard.
  absl::Status Close() {
    if (!writer_) return absl::OkStatus();
    absl::Status finished = writer_->Finish();
    writer_.reset();
    return finished;
  }

  int64_t shards() const { return shards_; }
  int64_t tokens() const { return tokens_; }

 private:
  const std::string dir_;
  const std::string tokenizer_id_;
  const int vocab_size_;
  const int64_t shard_tokens_;
  std::optional<TokenShardWriter> writer_;  // the shard being written
  int64_t shards_ = 0;
  int64_t tokens_ = 0;
};

// Tokenizes the inputs on `threads` threads into `shards`, in input order.
absl::Status WriteShards(const std::vector<std::string>& files, int64_t total_bytes,
                         const Tokenizer& tokenizer,
                         const DatasetOptions& options, int threads,
                         ShardedTokenWriter* shards, int64_t* skipped_lines,
                         DatasetProgress* progress) {
  std::vector<std::vector<int32_t>> ids(BatchSize(threads));  // per chunk of a batch
  progress->Start("tokenizing", total_bytes);
  const JsonlOptions jsonl = Jsonl(options, [&](const std::string& where) {
    if (++*skipped_lines <= kSkippedLinesTold) progress->Say(absl::StrCat("skipped ", where));
  });
  RETURN_IF_ERROR(ForEachBatch(
      files, jsonl, options.chunk_bytes, threads, &tokenizer,
      [&](const Chunk& chunk, size_t slot) {
        RETURN_IF_ERROR(CheckUtf8(chunk, files));
        absl::StatusOr<std::vector<int32_t>> encoded = tokenizer.Encode(chunk.text);
        if (!encoded.ok()) {
          return absl::Status(encoded.status().code(),
                              absl::StrCat(files[chunk.file], " at byte ", chunk.offset, ": ",
                                           encoded.status().message()));
        }
        ids[slot] = *std::move(encoded);
        return absl::OkStatus();
      },
      [&](const std::vector<Chunk>& batch) {
        for (size_t i = 0; i < batch.size(); ++i) RETURN_IF_ERROR(shards->Append(ids[i]));
        progress->Update(std::min(total_bytes, batch.back().input_bytes), shards->tokens());
        return absl::OkStatus();
      }));
  progress->Finish(total_bytes, shards->tokens());
  return shards->Close();
}

// InvalidArgument naming the inputs when they hold no text.
absl::Status EmptyCorpus(const std::vector<std::string>& files, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(
      "empty corpus: the ", files.size(), files.size() == 1 ? " input file (" : " input files (",
      files.front(), files.size() == 1 ? "" : ", ...", ") hold ", what));
}

// What shapes a dataset's tokens: the input files (absolute, with their
// sizes), the tokenizer's options and the shard size.
nlohmann::json DatasetRequest(const DatasetOptions& options,
                              const std::vector<std::string>& files) {
  std::error_code error;
  const auto file = [&](const std::string& path) {
    return nlohmann::json::array(
        {fs::absolute(path).lexically_normal().string(),
         static_cast<int64_t>(fs::file_size(path, error))});
  };
  nlohmann::json inputs = nlohmann::json::array();
  for (const std::string& path : files) inputs.push_back(file(path));
  return {{"inputs", inputs},
          {"text_field", options.text_field},
          {"skip_bad_lines", options.skip_bad_lines},
          {"tokenizer", options.tokenizer.empty() ? "char" : options.tokenizer},
          {"tokenizer_model",
           options.tokenizer_model.empty() ? nlohmann::json() : file(options.tokenizer_model)},
          {"tokenizer_json",
           options.tokenizer_json.empty() ? nlohmann::json() : file(options.tokenizer_json)},
          {"vocab_size", options.vocab_size},
          {"shard_tokens", options.shard_tokens}};
}

nlohmann::json SummaryJson(const DatasetSummary& s) {
  return {{"tokenizer_kind", s.tokenizer_kind}, {"vocab_size", s.vocab_size},
          {"shards", s.shards},                 {"tokens", s.tokens},
          {"bytes", s.bytes},                   {"skipped_lines", s.skipped_lines}};
}

// The first field of two requests that differs, as "KEY: THERE there, HERE here".
std::string FirstDifference(const nlohmann::json& there, const nlohmann::json& here) {
  const auto shown = [](const nlohmann::json& value) {
    std::string text = value.dump();
    return text.size() > 160 ? text.substr(0, 157) + "..." : text;
  };
  for (auto it = here.begin(); it != here.end(); ++it) {
    const nlohmann::json& before = there.contains(it.key()) ? there[it.key()] : nlohmann::json();
    if (before == it.value()) continue;
    if (it.key() == "inputs" && before.is_array()) {
      for (size_t i = 0; i < std::max(before.size(), it.value().size()); ++i) {
        const nlohmann::json a = i < before.size() ? before[i] : nlohmann::json();
        const nlohmann::json b = i < it.value().size() ? it.value()[i] : nlohmann::json();
        if (a != b) return absl::StrCat("input ", i + 1, ": ", shown(a), " there, ", shown(b), " here");
      }
    }
    return absl::StrCat(it.key(), ": ", shown(before), " there, ", shown(it.value()), " here");
  }
  return "the record differs";
}

// With reuse: the summary of the dataset `out` already holds when it was
// made from `request`; nullopt when there is none to keep (no such folder, or
// an empty one); FailedPrecondition for any other folder.
absl::StatusOr<std::optional<DatasetSummary>> KeptDataset(const std::string& out,
                                                         const nlohmann::json& request) {
  std::error_code error;
  if (!fs::exists(out, error) || (fs::is_directory(out, error) && fs::is_empty(out, error))) {
    return std::nullopt;
  }
  const auto refuse = [&](const std::string& why) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--out: ", out, " ", why, "; remove it or choose another --out; nothing was written"));
  };
  std::ifstream in(fs::path(out) / kDatasetRecordFile);
  if (!in) {
    return refuse(absl::StrCat("exists and holds no ", kDatasetRecordFile,
                               " (not a dataset, or one made before datasets recorded how)"));
  }
  const nlohmann::json record = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (!record.is_object() || !record.contains("request") || !record.contains("summary") ||
      !record["summary"].is_object()) {
    return refuse(absl::StrCat("holds a ", kDatasetRecordFile, " that is not a dataset record"));
  }
  if (record["request"] != request) {
    return refuse(absl::StrCat("holds a dataset made from another request (",
                               FirstDifference(record["request"], request), ")"));
  }
  const nlohmann::json& s = record["summary"];
  DatasetSummary summary;
  summary.tokenizer_kind = s.value("tokenizer_kind", "");
  summary.vocab_size = s.value("vocab_size", 0);
  summary.shards = s.value("shards", int64_t{0});
  summary.tokens = s.value("tokens", int64_t{0});
  summary.bytes = s.value("bytes", int64_t{0});
  summary.skipped_lines = s.value("skipped_lines", int64_t{0});
  summary.reused = true;
  return summary;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ExpandInputs(const std::vector<std::string>& inputs) {
  if (inputs.empty()) {
    return absl::InvalidArgumentError("no inputs: give text files, folders or globs");
  }
  std::vector<std::string> files;
  for (const std::string& input : inputs) {
    std::error_code error;
    const bool exists = fs::exists(input, error);
    const std::vector<std::string> matches =
        exists ? std::vector<std::string>{input} : Glob(input);
    if (matches.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(input, ": no such file or folder, and no file matches it as a glob"));
    }
    for (const std::string& path : matches) {
      if (fs::is_directory(path, error)) {
        RETURN_IF_ERROR(AppendFolder(path, &files));
      } else if (fs::is_regular_file(path, error)) {
        files.push_back(path);
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": neither a regular file nor a folder"));
      }
    }
  }
  return files;
}

absl::StatusOr<DatasetSummary> WriteDataset(const DatasetOptions& options,
                                            DatasetProgress* progress) {
  NoProgress silent;
  if (progress == nullptr) progress = &silent;
  RETURN_IF_ERROR(ValidateOptions(options));
  ASSIGN_OR_RETURN(const std::vector<std::string> files, ExpandInputs(options.inputs));
  const nlohmann::json request = DatasetRequest(options, files);
  if (options.reuse) {
    ASSIGN_OR_RETURN(std::optional<DatasetSummary> kept, KeptDataset(options.out, request));
    if (kept) return *std::move(kept);
  }
  ASSIGN_OR_RETURN(const fs::path out, CheckOut(options.out));
  DatasetSummary result;
  for (const std::string& file : files) {
    std::error_code error;
    result.bytes += static_cast<int64_t>(fs::file_size(file, error));
  }
  if (result.bytes == 0) return EmptyCorpus(files, "no bytes");
  const int threads = options.threads > 0
                          ? options.threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  absl::StatusOr<std::unique_ptr<StagingFolder>> staging = StagingFolder::Create(out.string());
  if (!staging.ok()) return AsInternal(staging.status());
  ASSIGN_OR_RETURN(const std::unique_ptr<Tokenizer> tokenizer,
                   MakeTokenizer(files, result.bytes, options, threads, (*staging)->path(),
                                 progress));
  RETURN_IF_ERROR(AsInternal(WriteFileAtomically((*staging)->path() + "/" + kDatasetTokenizerFile,
                                                 tokenizer->Serialize())));
  ShardedTokenWriter shards((*staging)->path(), *tokenizer, options.shard_tokens);
  RETURN_IF_ERROR(WriteShards(files, result.bytes, *tokenizer, options, threads, &shards,
                              &result.skipped_lines, progress));
  if (shards.tokens() == 0) return EmptyCorpus(files, "no tokens");
  result.tokenizer_kind = tokenizer->kind();
  result.vocab_size = tokenizer->vocab_size();
  result.shards = shards.shards();
  result.tokens = shards.tokens();
  const nlohmann::json record = {{"request", request}, {"summary", SummaryJson(result)}};
  RETURN_IF_ERROR(AsInternal(WriteFileAtomically(
      (*staging)->path() + "/" + kDatasetRecordFile, record.dump(2) + "\n")));
  RETURN_IF_ERROR(AsInternal((*staging)->Commit()));
  return result;
}

}  // namespace paci
