#pragma once

// Token shards: the files of a dataset folder that `pacictl prepare-data`
// writes, read memory-mapped by the corpus.
//
// A shard is a 48-byte header, then the payload: `count` token ids, each a
// little-endian uint16 (vocabularies of at most 65536 tokens) or uint32.
//   offset  size  field
//        0     8  magic "PACITOK\0"
//        8     4  format version, 1
//       12     4  bytes per token, 2 or 4
//       16     8  count, the number of tokens
//       24    16  the Tokenizer::Id() of the tokenizer that made them (hex)
//       40     4  CRC-32 (zlib's) of the payload
//       44     4  zero
// Header integers are little-endian too.

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace paci {

inline constexpr size_t kTokenShardHeaderBytes = 48;

// A dataset folder holds `tokenizer` (Tokenizer::Serialize's bytes) and the
// shards of its token stream, in order: shard-00000.bin, shard-00001.bin, ...
inline constexpr char kDatasetTokenizerFile[] = "tokenizer";
// "<dir>/shard-<index, 5 digits or more>.bin".
std::string TokenShardPath(const std::string& dir, int64_t index);

// 2 when every id of a vocabulary of `vocab_size` tokens fits a uint16, else 4.
int BytesPerToken(int vocab_size);

// Writes one shard, streaming: memory does not grow with its size. Not
// thread-safe; move-only. A shard that is not finished is left with a zero
// header, which no reader accepts.
class TokenShardWriter {
 public:
  // Creates (or truncates) `path`. Internal naming the path when it cannot;
  // InvalidArgument when tokenizer_id is not 16 characters or vocab_size < 1.
  static absl::StatusOr<TokenShardWriter> Create(const std::string& path,
                                                 std::string_view tokenizer_id, int vocab_size);

  // Appends ids (blocking file I/O). InvalidArgument naming the shard for an
  // id outside [0, vocab_size); Internal naming it on a write error.
  absl::Status Append(absl::Span<const int32_t> ids);
  // Writes the header, flushes and syncs the file to disk and closes it.
  // Internal naming the shard on an I/O error.
  absl::Status Finish();

  int64_t tokens() const { return count_; }
  const std::string& path() const { return path_; }

 private:
  struct FileCloser {
    void operator()(std::FILE* file) const { std::fclose(file); }
  };

  TokenShardWriter(std::string path, std::unique_ptr<std::FILE, FileCloser> file,
                   std::string tokenizer_id, int vocab_size);
  absl::Status WriteError() const;

  std::string path_;
  std::unique_ptr<std::FILE, FileCloser> file_;
  std::string tokenizer_id_;
  int vocab_size_;
  int bytes_per_token_;
  int64_t count_ = 0;
  uint32_t crc_;
  std::vector<uint8_t> buffer_;  // one Append's encoded ids
};

// One shard, memory-mapped read-only: its tokens are paged in from the file as
// they are read, and nothing of it is copied into the process. Immutable
// after Open; thread-safe; move-only.
class TokenShard {
 public:
  // Checks and maps `path` (blocking: reads the whole file once for the
  // CRC, in small pieces, not through the mapping). Every error names the
  // file:
  //   NotFound when it cannot be opened;
  //   DataLoss when it is not a version-1 shard (magic, version), is
  //   truncated or longer than its header says, its payload does not match
  //   the CRC, or it holds an id outside [0, vocab_size);
  //   FailedPrecondition when another tokenizer made it (tokenizer_id) or it
  //   stores ids in another width than a vocab_size vocabulary needs.
  static absl::StatusOr<TokenShard> Open(const std::string& path, std::string_view tokenizer_id,
                                         int vocab_size);

  TokenShard(TokenShard&& other) noexcept;
  TokenShard& operator=(TokenShard&& other) noexcept;
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;
  ~TokenShard();

  int64_t size() const { return count_; }
  const std::string& path() const { return path_; }

  // Copies the ids [begin, begin + n) into out[0, n); the caller keeps
  // 0 <= begin <= begin + n <= size().
  void Copy(int64_t begin, int64_t n, int32_t* out) const;

  // Takes the pages read so far out of this process' resident set
  // (madvise MADV_DONTNEED): they stay in the page cache, and a later Copy
  // maps them again. Safe beside concurrent Copy calls.
  void ReleasePages() const;

 private:
  TokenShard(std::string path, const uint8_t* mapping, size_t mapped_bytes, int64_t count,
             int bytes_per_token);

  std::string path_;
  const uint8_t* mapping_ = nullptr;  // the whole file; payload after the header
  size_t mapped_bytes_ = 0;
  int64_t count_ = 0;
  int bytes_per_token_ = 0;
};

}  // namespace paci
