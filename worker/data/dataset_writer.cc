#include "worker/data/dataset_writer.h"

#include <algorithm>
#include <atomic>
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
#include "worker/data/dataset_record.h"
#include "worker/data/hf_tokenizer.h"
#include "worker/data/sentencepiece_tokenizer.h"
#include "worker/data/text_inputs.h"
#include "worker/data/token_shards.h"

namespace paci {
namespace {

namespace fs = std::filesystem;

using dataset_internal::Chunk;
using dataset_internal::ChunkReader;
using dataset_internal::DatasetRequest;
using dataset_internal::IsJsonl;
using dataset_internal::JsonlOptions;
using dataset_internal::KeptDataset;
using dataset_internal::SummaryJson;

// The chunks read at a time: two per thread, so that a thread that finishes
// early takes another.
size_t BatchSize(int threads) { return 2 * static_cast<size_t>(threads); }

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

}  // namespace

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
