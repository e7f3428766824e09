#include "common/memory_limit.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "common/read_file.h"

namespace paci {

namespace {

// Above this a cgroup v1 limit means "none" (the kernel's page-rounded 2^63 - 1).
constexpr uint64_t kUnlimited = uint64_t{1} << 60;

}  // namespace

std::optional<uint64_t> ParseCgroupMemoryLimit(std::string_view text) {
  const absl::string_view value = absl::StripAsciiWhitespace(absl::string_view(text.data(), text.size()));
  uint64_t bytes = 0;
  if (value == "max" || !absl::SimpleAtoi(value, &bytes) || bytes == 0 || bytes >= kUnlimited) {
    return std::nullopt;
  }
  return bytes;
}

std::optional<uint64_t> ParseMemTotal(std::string_view meminfo) {
  for (absl::string_view line : absl::StrSplit(absl::string_view(meminfo.data(), meminfo.size()), '\n')) {
    if (!absl::ConsumePrefix(&line, "MemTotal:")) continue;
    line = absl::StripAsciiWhitespace(line);
    uint64_t kib = 0;
    if (!absl::ConsumeSuffix(&line, "kB") ||
        !absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &kib)) {
      return std::nullopt;
    }
    return kib * 1024;
  }
  return std::nullopt;
}

MemoryLimit MemoryLimitOfThisProcess() {
  MemoryLimit limit;
  if (absl::StatusOr<std::string> meminfo = ReadFileToString("/proc/meminfo", 1 << 20); meminfo.ok()) {
    if (std::optional<uint64_t> total = ParseMemTotal(*meminfo)) {
      limit = {*total, "the machine's memory"};
    }
  }
  for (const char* path : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    absl::StatusOr<std::string> text = ReadFileToString(path, 4096);
    if (!text.ok()) continue;
    if (std::optional<uint64_t> bytes = ParseCgroupMemoryLimit(*text);
        bytes && (limit.bytes == 0 || *bytes < limit.bytes)) {
      limit = {*bytes, "its cgroup's memory limit"};
    }
    break;
  }
  return limit;
}

}  // namespace paci
