#include "common/atomic_file.h"

#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <streambuf>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace paci {
namespace {

absl::Status WriteError(const std::string& path, int error) {
  return absl::UnavailableError(absl::StrCat("cannot write ", path, ": ", std::strerror(error)));
}

// write(2) until all of it is written: a write may take part of the bytes,
// or be interrupted by a signal before taking any. The errno, 0 when written.
int WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t written = ::write(fd, data, size);
    if (written < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    data += written;
    size -= static_cast<size_t>(written);
  }
  return 0;
}

int SyncFd(int fd) {
  int rc;
  do {
    rc = ::fsync(fd);
  } while (rc != 0 && errno == EINTR);
  return rc == 0 ? 0 : errno;
}

// An ostream's buffer over a file descriptor that keeps the first write
// error's errno: std::ostream itself only says that something failed.
class FdStreamBuffer : public std::streambuf {
 public:
  explicit FdStreamBuffer(int fd) : fd_(fd), buffer_(64 * 1024) {
    setp(buffer_.data(), buffer_.data() + buffer_.size());
  }

  int error() const { return error_; }

 protected:
  int_type overflow(int_type c) override {
    if (!Drain()) return traits_type::eof();
    if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
    *pptr() = traits_type::to_char_type(c);
    pbump(1);
    return c;
  }

  // Large writes (a whole archive) go straight to the file, not through the buffer.
  std::streamsize xsputn(const char* data, std::streamsize size) override {
    if (size < epptr() - pptr()) {
      std::memcpy(pptr(), data, static_cast<size_t>(size));
      pbump(static_cast<int>(size));
      return size;
    }
    if (!Drain()) return 0;
    error_ = WriteAll(fd_, data, static_cast<size_t>(size));
    return error_ == 0 ? size : 0;
  }

  int sync() override { return Drain() ? 0 : -1; }

 private:
  bool Drain() {
    if (error_ != 0) return false;
    error_ = WriteAll(fd_, pbase(), static_cast<size_t>(pptr() - pbase()));
    setp(buffer_.data(), buffer_.data() + buffer_.size());
    return error_ == 0;
  }

  const int fd_;
  std::vector<char> buffer_;
  int error_ = 0;
};

// The temporary file beside the target: closed, and removed unless Commit
// renamed it, however the write ends (an error or an exception).
class TemporaryFile {
 public:
  // A name no other writer uses, this process's or another's: pid and a
  // counter. O_EXCL skips what a crashed process with the same pid left
  // (in a container every main is pid 1).
  static absl::StatusOr<TemporaryFile> Create(const std::string& target) {
    static std::atomic<uint64_t> counter{0};
    const std::string prefix = absl::StrCat(target, ".tmp.", ::getpid(), ".");
    for (int attempt = 0; attempt < 100; ++attempt) {
      std::string name = absl::StrCat(prefix, counter.fetch_add(1));
      const int fd = ::open(name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd >= 0) return TemporaryFile(std::move(name), fd);
      if (errno != EEXIST && errno != EINTR) return WriteError(target, errno);
    }
    return WriteError(target, EEXIST);
  }

  TemporaryFile(TemporaryFile&& other)
      : name_(std::exchange(other.name_, std::string())), fd_(std::exchange(other.fd_, -1)) {}
  TemporaryFile& operator=(TemporaryFile&&) = delete;
  ~TemporaryFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!name_.empty()) std::remove(name_.c_str());
  }

  int fd() const { return fd_; }

  // Syncs and closes the file and renames it to `target`.
  absl::Status Commit(const std::string& target) {
    if (const int error = SyncFd(fd_); error != 0) return WriteError(target, error);
    // Linux frees the descriptor even when close fails; EINTR after a
    // successful fsync loses nothing, any other error (EIO, NFS's ENOSPC) does.
    const int closed = ::close(std::exchange(fd_, -1));
    if (closed != 0 && errno != EINTR) return WriteError(target, errno);
    if (std::rename(name_.c_str(), target.c_str()) != 0) {
      const int error = errno;
      return absl::UnavailableError(absl::StrCat("cannot rename ", name_, " to ", target, ": ",
                                                 std::strerror(error)));
    }
    name_.clear();
    return absl::OkStatus();
  }

 private:
  TemporaryFile(std::string name, int fd) : name_(std::move(name)), fd_(fd) {}

  std::string name_;  // empty once renamed
  int fd_;
};

// Runs `write` into the file; the file's write error before `write`'s own.
absl::Status WriteThrough(const std::string& path, int fd,
                          absl::FunctionRef<absl::Status(std::ostream&)> write) {
  FdStreamBuffer buffer(fd);
  std::ostream out(&buffer);
  const absl::Status written = write(out);
  out.flush();
  if (buffer.error() != 0) return WriteError(path, buffer.error());
  if (!written.ok()) return written;
  if (!out) {
    return absl::UnavailableError(absl::StrCat("cannot write ", path, ": the stream failed"));
  }
  return absl::OkStatus();
}

std::string FolderOf(const std::string& path) {
  const std::string folder = std::filesystem::path(path).parent_path().string();
  return folder.empty() ? "." : folder;
}

}  // namespace

absl::Status WriteFileAtomically(const std::string& path,
                                 absl::FunctionRef<absl::Status(std::ostream& out)> write) {
  ASSIGN_OR_RETURN(TemporaryFile file, TemporaryFile::Create(path));
  RETURN_IF_ERROR(WriteThrough(path, file.fd(), write));
  RETURN_IF_ERROR(file.Commit(path));
  return SyncFolder(FolderOf(path));
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents) {
  return WriteFileAtomically(path, [contents](std::ostream& out) {
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    return absl::OkStatus();
  });
}

absl::Status SyncFolder(const std::string& folder) {
  const int fd = ::open(folder.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot sync the folder ", folder, ": ", std::strerror(errno)));
  }
  const int error = SyncFd(fd);
  ::close(fd);
  if (error != 0 && error != EINVAL) {
    return absl::UnavailableError(
        absl::StrCat("cannot sync the folder ", folder, ": ", std::strerror(error)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<StagingFolder>> StagingFolder::Create(
    const std::string& destination) {
  const std::filesystem::path out(destination);
  std::string pattern =
      (out.parent_path() / ("." + out.filename().string() + ".tmp-XXXXXX")).string();
  if (mkdtemp(pattern.data()) == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot make a folder beside ", destination, ": ",
                                               std::strerror(errno)));
  }
  // mkdtemp makes it 0700: it becomes what mkdir would have made, readable by
  // other users (the workers' 65532 in the images) where the umask allows.
  const mode_t mask = umask(0);
  umask(mask);
  chmod(pattern.c_str(), 0777 & ~mask);
  return std::unique_ptr<StagingFolder>(new StagingFolder(pattern, destination));
}

StagingFolder::~StagingFolder() {
  std::error_code ignored;
  if (!committed_) std::filesystem::remove_all(path_, ignored);
}

absl::Status StagingFolder::Commit() {
  RETURN_IF_ERROR(SyncFolder(path_));
  std::error_code error;
  std::filesystem::rename(path_, destination_, error);
  if (error) {
    return absl::UnavailableError(
        absl::StrCat("cannot rename ", path_, " to ", destination_, ": ", error.message()));
  }
  committed_ = true;
  return SyncFolder(std::filesystem::path(destination_).parent_path().string());
}

}  // namespace paci
