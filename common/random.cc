#include "common/random.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>

#include <glog/logging.h>

#include "absl/strings/escaping.h"

namespace paci {

std::string RandomBytes(size_t count) {
  std::string bytes(count, '\0');
  size_t got = 0;
  while (got < count) {
    const ssize_t n = getrandom(bytes.data() + got, count - got, 0);
    if (n < 0 && errno == EINTR) continue;
    PCHECK(n > 0) << "getrandom";
    got += static_cast<size_t>(n);
  }
  return bytes;
}

std::string RandomHex(size_t count) { return absl::BytesToHexString(RandomBytes(count)); }

uint64_t RandomUint64() {
  const std::string bytes = RandomBytes(sizeof(uint64_t));
  uint64_t value;
  std::memcpy(&value, bytes.data(), sizeof(value));
  return value;
}

}  // namespace paci
