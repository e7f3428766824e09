#include "worker/data/dataset_writer.h"

#include <glob.h>
#include <stdlib.h>
#include <sys/stat.h>

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
#include "worker/data/char_tokenizer.h"
#include "worker/data/sentencepiece_tokenizer.h"
#include "worker/data/token_shards.h"

namespace paci {
namespace {

namespace fs = std::filesystem;

// The chunks read at a time: two per thread, so that a thread that finishes
// early takes another.
size_t BatchSize(int threads) { return 2 * static_cast<size_t>(threads); }

// A piece of one input file, cut as worker/data/tokenizer.h's ChunkEnd cuts.
struct Chunk {
  size_t file = 0;      // index into the input files
  uint64_t offset = 0;  // of text in that file
  std::string text;
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

// Reads the input files one after the other as chunks: each ends just past
// the first newline at or after chunk_bytes, or at the end of its file.
class ChunkReader {
 public:
  ChunkReader(const std::vector<std::string>& files, size_t chunk_bytes)
      : files_(files), chunk_bytes_(chunk_bytes) {}

  // The next chunk; false at the end of the last file. NotFound naming a file
  // that cannot be read.
  absl::StatusOr<bool> Next(Chunk* chunk) {
    while (true) {
      if (!in_.is_open()) {
        if (next_file_ == files_.size()) return false;
        in_.clear();
        in_.open(files_[next_file_], std::ios::binary);
        if (!in_) return CannotRead(files_[next_file_]);
        file_ = next_file_++;
        offset_ = 0;
        buffer_.clear();
      }
      const size_t newline =
          buffer_.size() > chunk_bytes_ ? buffer_.find('\n', chunk_bytes_) : std::string::npos;
      const bool at_end = in_.eof();
      if (newline != std::string::npos || (at_end && !buffer_.empty())) {
        const size_t end = newline != std::string::npos ? newline + 1 : buffer_.size();
        *chunk = {file_, offset_, buffer_.substr(0, end)};
        buffer_.erase(0, end);
        offset_ += end;
        return true;
      }
      if (at_end) {
        in_.close();
        continue;
      }
      const size_t size = buffer_.size();
      buffer_.resize(size + chunk_bytes_);
      in_.read(buffer_.data() + size, static_cast<std::streamsize>(chunk_bytes_));
      if (in_.bad()) return CannotRead(files_[file_]);
      buffer_.resize(size + static_cast<size_t>(in_.gcount()));
    }
  }

 private:
  static absl::Status CannotRead(const std::string& path) {
    return absl::NotFoundError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  }

  const std::vector<std::string>& files_;
  const size_t chunk_bytes_;
  std::ifstream in_;
  size_t next_file_ = 0;
  size_t file_ = 0;
  uint64_t offset_ = 0;  // of buffer_ in the current file
  std::string buffer_;
};

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

// Reads the inputs chunk by chunk, a batch of chunks at a time: work(chunk,
// slot) runs on `threads` threads for the chunks of a batch, then
// done(batch) on the calling thread, batch after batch in input order.
absl::Status ForEachBatch(const std::vector<std::string>& files, size_t chunk_bytes, int threads,
                          const std::function<absl::Status(const Chunk&, size_t)>& work,
                          const std::function<absl::Status(const std::vector<Chunk>&)>& done) {
  ChunkReader reader(files, chunk_bytes);
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
  int64_t bytes = 0;
  progress->Start("vocabulary", total_bytes);
  RETURN_IF_ERROR(ForEachBatch(
      files, options.chunk_bytes, threads,
      [&](const Chunk& chunk, size_t slot) {
        RETURN_IF_ERROR(CheckUtf8(chunk, files));
        // Cannot fail: the chunk is valid UTF-8.
        found[slot] = CharTokenizer::FromText(chunk.text)->code_points();
        return absl::OkStatus();
      },
      [&](const std::vector<Chunk>& batch) {
        for (size_t i = 0; i < batch.size(); ++i) {
          for (char32_t c : found[i]) seen[c] = true;
          bytes += static_cast<int64_t>(batch[i].text.size());
        }
        progress->Update(bytes, 0);
        return absl::OkStatus();
      }));
  progress->Finish(bytes, 0);
  std::vector<char32_t> code_points;
  for (char32_t c = 0; c < seen.size(); ++c) {
    if (seen[c]) code_points.push_back(c);
  }
  return CharTokenizer::FromCodePoints(std::move(code_points));
}

// The tokenizer the options ask for: the inputs' characters, a SentencePiece
// model trained on them, or one loaded from --tokenizer_model.
absl::StatusOr<std::unique_ptr<Tokenizer>> MakeTokenizer(const std::vector<std::string>& files,
                                                         int64_t total_bytes,
                                                         const DatasetOptions& options,
                                                         int threads, DatasetProgress* progress) {
  if (!options.tokenizer_model.empty()) {
    absl::StatusOr<SentencePieceTokenizer> model =
        SentencePieceTokenizer::Load(options.tokenizer_model);
    if (!model.ok()) {
      return absl::Status(model.status().code(),
                          absl::StrCat("--tokenizer_model: ", model.status().message()));
    }
    return std::make_unique<SentencePieceTokenizer>(*std::move(model));
  }
  if (options.tokenizer.empty() || options.tokenizer == "char") {
    ASSIGN_OR_RETURN(CharTokenizer tokenizer,
                     CharVocabulary(files, total_bytes, options, threads, progress));
    return std::make_unique<CharTokenizer>(std::move(tokenizer));
  }
  SentencePieceTrainingOptions training;
  training.model_type = options.tokenizer;
  training.vocab_size = options.vocab_size;
  progress->Say(absl::StrCat("training a ", options.tokenizer, " tokenizer of ",
                              options.vocab_size, " tokens"));
  absl::StatusOr<SentencePieceTokenizer> trained = SentencePieceTokenizer::Train(files, training);
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
                         ShardedTokenWriter* shards, DatasetProgress* progress) {
  std::vector<std::vector<int32_t>> ids(BatchSize(threads));  // per chunk of a batch
  int64_t bytes = 0;
  progress->Start("tokenizing", total_bytes);
  RETURN_IF_ERROR(ForEachBatch(
      files, options.chunk_bytes, threads,
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
        for (size_t i = 0; i < batch.size(); ++i) {
          RETURN_IF_ERROR(shards->Append(ids[i]));
          bytes += static_cast<int64_t>(batch[i].text.size());
        }
        progress->Update(bytes, shards->tokens());
        return absl::OkStatus();
      }));
  progress->Finish(bytes, shards->tokens());
  return shards->Close();
}

// InvalidArgument naming the inputs when they hold no text.
absl::Status EmptyCorpus(const std::vector<std::string>& files, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(
      "empty corpus: the ", files.size(), files.size() == 1 ? " input file (" : " input files (",
      files.front(), files.size() == 1 ? "" : ", ...", ") hold ", what));
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
  ASSIGN_OR_RETURN(const fs::path out, CheckOut(options.out));
  ASSIGN_OR_RETURN(const std::vector<std::string> files, ExpandInputs(options.inputs));
  DatasetSummary result;
  for (const std::string& file : files) {
    std::error_code error;
    result.bytes += static_cast<int64_t>(fs::file_size(file, error));
  }
  if (result.bytes == 0) return EmptyCorpus(files, "no bytes");
  const int threads = options.threads > 0
                          ? options.threads
                          : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  ASSIGN_OR_RETURN(const std::unique_ptr<Tokenizer> tokenizer,
                   MakeTokenizer(files, result.bytes, options, threads, progress));
  absl::StatusOr<std::unique_ptr<StagingFolder>> staging = StagingFolder::Create(out.string());
  if (!staging.ok()) return AsInternal(staging.status());
  RETURN_IF_ERROR(AsInternal(WriteFileAtomically((*staging)->path() + "/" + kDatasetTokenizerFile,
                                                 tokenizer->Serialize())));
  ShardedTokenWriter shards((*staging)->path(), *tokenizer, options.shard_tokens);
  RETURN_IF_ERROR(WriteShards(files, result.bytes, *tokenizer, options, threads, &shards, progress));
  if (shards.tokens() == 0) return EmptyCorpus(files, "no tokens");
  RETURN_IF_ERROR(AsInternal((*staging)->Commit()));

  result.tokenizer_kind = tokenizer->kind();
  result.vocab_size = tokenizer->vocab_size();
  result.shards = shards.shards();
  result.tokens = shards.tokens();
  return result;
}

}  // namespace paci
