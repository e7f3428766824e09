#include "common/read_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace paci {
namespace {

// What a file that is not a regular one is: "a FIFO, not a regular file".
const char* KindOf(mode_t mode) {
  if (S_ISCHR(mode)) return "a character device, not a regular file";
  if (S_ISBLK(mode)) return "a block device, not a regular file";
  if (S_ISFIFO(mode)) return "a FIFO, not a regular file";
  if (S_ISSOCK(mode)) return "a socket, not a regular file";
  return "not a regular file";
}

}  // namespace

absl::StatusOr<std::string> ReadFileToString(const std::string& path, uint64_t max_bytes) {
  const auto cannot_read = [&path](int error) {
    return absl::NotFoundError(absl::StrCat("cannot read ", path, ": ", std::strerror(error)));
  };
  // O_NONBLOCK: opening a FIFO with no writer must not wait for one.
  const int fd = open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return cannot_read(errno);
  struct FdCloser {
    int fd;
    ~FdCloser() { close(fd); }
  } closer{fd};
  struct stat st {};
  if (fstat(fd, &st) != 0) return cannot_read(errno);
  if (S_ISDIR(st.st_mode)) return cannot_read(EISDIR);
  if (!S_ISREG(st.st_mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, " is ", KindOf(st.st_mode)));
  }
  const auto too_large = [&] {
    return absl::ResourceExhaustedError(
        absl::StrCat(path, " is larger than ", max_bytes, " bytes"));
  };
  if (static_cast<uint64_t>(st.st_size) > max_bytes) return too_large();
  std::string text;
  text.reserve(static_cast<size_t>(st.st_size));
  char buffer[1 << 16];
  while (true) {
    const ssize_t n = read(fd, buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return cannot_read(errno);
    if (n == 0) break;
    text.append(buffer, static_cast<size_t>(n));
    if (text.size() > max_bytes) return too_large();  // it grew while read
  }
  return text;
}

}  // namespace paci
