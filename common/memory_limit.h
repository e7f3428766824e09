#pragma once

// How much memory this process may use: its cgroup's limit (a pod's
// resources.limits.memory) when it has one, else the machine's. Pure parsing
// below, tested on its own; MemoryLimitOfThisProcess reads /sys and /proc.

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace paci {

struct MemoryLimit {
  uint64_t bytes = 0;
  std::string source;  // "its cgroup's memory limit" or "the machine's memory"
};

// cgroup v2's memory.max ("max" or bytes) or v1's memory.limit_in_bytes (a
// number near 2^63 when unlimited): the limit, or nullopt when there is none
// or the text is not a number.
std::optional<uint64_t> ParseCgroupMemoryLimit(std::string_view text);
// MemTotal of /proc/meminfo, in bytes; nullopt when the text has none.
std::optional<uint64_t> ParseMemTotal(std::string_view meminfo);
// The smaller of the cgroup's limit and the machine's memory; bytes 0 when
// neither can be read (callers then check nothing).
MemoryLimit MemoryLimitOfThisProcess();

}  // namespace paci
