#include "worker/data/token_shards.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/status_macros.h"

// The payload is read as host integers straight from the mapping.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "token shards are little-endian");

namespace paci {
namespace {

constexpr char kMagic[8] = {'P', 'A', 'C', 'I', 'T', 'O', 'K', '\0'};
constexpr uint32_t kVersion = 1;
constexpr size_t kIdBytes = 16;

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t bytes_per_token;
  uint64_t count;
  char tokenizer_id[kIdBytes];
  uint32_t crc;
  uint32_t reserved;
};
static_assert(sizeof(Header) == kTokenShardHeaderBytes);

absl::Status DataLoss(const std::string& path, const std::string& what) {
  return absl::DataLossError(absl::StrCat("token shard ", path, ": ", what));
}

// Reads the header of the open shard `fd` and checks everything in it against
// the file's size and the expected tokenizer.
absl::StatusOr<Header> ReadHeader(const std::string& path, int fd, std::string_view tokenizer_id,
                                  int vocab_size) {
  struct stat info;
  if (fstat(fd, &info) != 0) return DataLoss(path, std::strerror(errno));
  const auto file_bytes = static_cast<uint64_t>(info.st_size);
  Header header;
  if (file_bytes < sizeof(header) || pread(fd, &header, sizeof(header), 0) != sizeof(header)) {
    return DataLoss(path, absl::StrCat("truncated: ", file_bytes, " bytes, less than its ",
                                       sizeof(header), "-byte header"));
  }
  if (std::memcmp(header.magic, kMagic, sizeof(kMagic)) != 0) {
    return DataLoss(path, "not a token shard (bad magic)");
  }
  if (header.version != kVersion) {
    return DataLoss(path, absl::StrCat("format version ", header.version, ", but this reader "
                                       "knows version ", kVersion));
  }
  if (header.bytes_per_token != 2 && header.bytes_per_token != 4) {
    return DataLoss(path, absl::StrCat(header.bytes_per_token,
                                       " bytes per token, but only 2 and 4 exist"));
  }
  const uint64_t payload_bytes = file_bytes - sizeof(header);
  if (header.count > payload_bytes / header.bytes_per_token ||
      header.count * header.bytes_per_token != payload_bytes) {
    return DataLoss(path, absl::StrCat(
        "truncated or padded: ", file_bytes, " bytes, but its header says ", header.count,
        " tokens of ", header.bytes_per_token, " bytes after the ", sizeof(header),
        "-byte header"));
  }
  const std::string_view id(header.tokenizer_id, kIdBytes);
  if (id != tokenizer_id) {
    return absl::FailedPreconditionError(
        absl::StrCat("token shard ", path, ": made by tokenizer ", std::string(id),
                     ", but the dataset's tokenizer is ", std::string(tokenizer_id)));
  }
  if (header.bytes_per_token != static_cast<uint32_t>(BytesPerToken(vocab_size))) {
    return absl::FailedPreconditionError(absl::StrCat(
        "token shard ", path, ": ", header.bytes_per_token, " bytes per token, but a vocabulary "
        "of ", vocab_size, " tokens is stored in ", BytesPerToken(vocab_size)));
  }
  return header;
}

// Reads the payload with read(), not through a mapping, so that checking a
// large shard does not leave it resident: its CRC and its largest id.
absl::Status CheckPayload(const std::string& path, int fd, const Header& header,
                          int vocab_size) {
  std::vector<uint8_t> buffer(size_t{1} << 20);  // a whole number of tokens
  uint32_t crc = crc32(0L, Z_NULL, 0);
  uint32_t max_id = 0;
  uint64_t left = header.count * header.bytes_per_token;
  if (lseek(fd, sizeof(Header), SEEK_SET) < 0) return DataLoss(path, std::strerror(errno));
  while (left > 0) {
    const ssize_t n = read(fd, buffer.data(), std::min<uint64_t>(left, buffer.size()));
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) return DataLoss(path, "is shorter than its header says: it changed while read");
    if (n < 0) return DataLoss(path, absl::StrCat("cannot read: ", std::strerror(errno)));
    if (n % header.bytes_per_token != 0) {
      return DataLoss(path, "short read inside a token");  // regular files do not do this
    }
    crc = crc32(crc, buffer.data(), static_cast<uInt>(n));
    for (ssize_t i = 0; i < n; i += header.bytes_per_token) {
      uint32_t id = 0;
      std::memcpy(&id, buffer.data() + i, header.bytes_per_token);
      max_id = std::max(max_id, id);
    }
    left -= n;
  }
  if (crc != header.crc) {
    return DataLoss(path, absl::StrCat("its payload does not match its CRC-32 (", crc, " != ",
                                       header.crc, "): the file is corrupt"));
  }
  if (header.count > 0 && max_id >= static_cast<uint32_t>(vocab_size)) {
    return DataLoss(path, absl::StrCat("holds token id ", max_id, ", outside the tokenizer's ",
                                       vocab_size, " tokens"));
  }
  return absl::OkStatus();
}

}  // namespace

int BytesPerToken(int vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

std::string TokenShardPath(const std::string& dir, int64_t index) {
  return absl::StrFormat("%s/shard-%05d.bin", dir, index);
}

TokenShardWriter::TokenShardWriter(std::string path, std::unique_ptr<std::FILE, FileCloser> file,
                                   std::string tokenizer_id, int vocab_size)
    : path_(std::move(path)),
      file_(std::move(file)),
      tokenizer_id_(std::move(tokenizer_id)),
      vocab_size_(vocab_size),
      bytes_per_token_(BytesPerToken(vocab_size)),
      crc_(crc32(0L, Z_NULL, 0)) {}

absl::StatusOr<TokenShardWriter> TokenShardWriter::Create(const std::string& path,
                                                          std::string_view tokenizer_id,
                                                          int vocab_size) {
  if (tokenizer_id.size() != kIdBytes || vocab_size < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "token shard ", path, ": needs a 16-character tokenizer id and a vocabulary, got \"",
        std::string(tokenizer_id), "\" and ", vocab_size, " tokens"));
  }
  std::unique_ptr<std::FILE, FileCloser> file(std::fopen(path.c_str(), "wb"));
  const Header zero = {};
  if (file == nullptr || std::fwrite(&zero, sizeof(zero), 1, file.get()) != 1) {
    return absl::InternalError(
        absl::StrCat("cannot write token shard ", path, ": ", std::strerror(errno)));
  }
  return TokenShardWriter(path, std::move(file), std::string(tokenizer_id), vocab_size);
}

absl::Status TokenShardWriter::WriteError() const {
  return absl::InternalError(
      absl::StrCat("cannot write token shard ", path_, ": ", std::strerror(errno)));
}

absl::Status TokenShardWriter::Append(absl::Span<const int32_t> ids) {
  buffer_.resize(ids.size() * bytes_per_token_);
  uint8_t* out = buffer_.data();
  for (const int32_t id : ids) {
    if (id < 0 || id >= vocab_size_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "token shard ", path_, ": token id ", id, " is outside the vocabulary of ",
          vocab_size_));
    }
    const auto value = static_cast<uint32_t>(id);
    std::memcpy(out, &value, bytes_per_token_);  // the low bytes: little-endian
    out += bytes_per_token_;
  }
  if (std::fwrite(buffer_.data(), 1, buffer_.size(), file_.get()) != buffer_.size()) {
    return WriteError();
  }
  crc_ = crc32(crc_, buffer_.data(), static_cast<uInt>(buffer_.size()));
  count_ += static_cast<int64_t>(ids.size());
  return absl::OkStatus();
}

absl::Status TokenShardWriter::Finish() {
  Header header = {};
  std::memcpy(header.magic, kMagic, sizeof(kMagic));
  header.version = kVersion;
  header.bytes_per_token = static_cast<uint32_t>(bytes_per_token_);
  header.count = static_cast<uint64_t>(count_);
  std::memcpy(header.tokenizer_id, tokenizer_id_.data(), kIdBytes);
  header.crc = crc_;
  std::FILE* file = file_.get();
  if (std::fseek(file, 0, SEEK_SET) != 0 || std::fwrite(&header, sizeof(header), 1, file) != 1 ||
      std::fflush(file) != 0 || fsync(fileno(file)) != 0) {
    return WriteError();
  }
  if (std::fclose(file_.release()) != 0) return WriteError();
  return absl::OkStatus();
}

TokenShard::TokenShard(std::string path, const uint8_t* mapping, size_t mapped_bytes,
                       int64_t count, int bytes_per_token)
    : path_(std::move(path)),
      mapping_(mapping),
      mapped_bytes_(mapped_bytes),
      count_(count),
      bytes_per_token_(bytes_per_token) {}

absl::StatusOr<TokenShard> TokenShard::Open(const std::string& path,
                                            std::string_view tokenizer_id, int vocab_size) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(
        absl::StrCat("token shard ", path, ": cannot open: ", std::strerror(errno)));
  }
  absl::StatusOr<Header> header = ReadHeader(path, fd, tokenizer_id, vocab_size);
  absl::Status checked = header.ok() ? CheckPayload(path, fd, *header, vocab_size)
                                     : header.status();
  if (!checked.ok()) {
    close(fd);
    return checked;
  }
  const size_t bytes = sizeof(Header) + header->count * header->bytes_per_token;
  void* mapping = mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  const int map_error = errno;
  close(fd);  // the mapping keeps the file
  if (mapping == MAP_FAILED) {
    return absl::InternalError(
        absl::StrCat("token shard ", path, ": cannot map: ", std::strerror(map_error)));
  }
  // Windows are drawn at random: read ahead of one is wasted.
  madvise(mapping, bytes, MADV_RANDOM);
  return TokenShard(path, static_cast<const uint8_t*>(mapping), bytes,
                    static_cast<int64_t>(header->count), static_cast<int>(header->bytes_per_token));
}

TokenShard::TokenShard(TokenShard&& other) noexcept { *this = std::move(other); }

TokenShard& TokenShard::operator=(TokenShard&& other) noexcept {
  if (this != &other) {
    if (mapping_ != nullptr) munmap(const_cast<uint8_t*>(mapping_), mapped_bytes_);
    path_ = std::move(other.path_);
    mapping_ = std::exchange(other.mapping_, nullptr);
    mapped_bytes_ = std::exchange(other.mapped_bytes_, 0);
    count_ = std::exchange(other.count_, 0);
    bytes_per_token_ = other.bytes_per_token_;
  }
  return *this;
}

TokenShard::~TokenShard() {
  if (mapping_ != nullptr) munmap(const_cast<uint8_t*>(mapping_), mapped_bytes_);
}

void TokenShard::ReleasePages() const {
  if (mapping_ != nullptr) madvise(const_cast<uint8_t*>(mapping_), mapped_bytes_, MADV_DONTNEED);
}

void TokenShard::Copy(int64_t begin, int64_t n, int32_t* out) const {
  const uint8_t* payload = mapping_ + sizeof(Header);
  if (bytes_per_token_ == 2) {
    const uint8_t* from = payload + begin * 2;
    for (int64_t i = 0; i < n; ++i) {
      uint16_t id;
      std::memcpy(&id, from + i * 2, 2);
      out[i] = id;
    }
  } else {
    std::memcpy(out, payload + begin * 4, n * 4);
  }
}

}  // namespace paci
