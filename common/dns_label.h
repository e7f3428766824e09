#pragma once

// A DNS-1123 label, what Kubernetes requires of a namespace's or a volume's
// name, and paci of a job's: 1 to 63 lower-case letters, digits and '-',
// starting and ending with a letter or digit. Header-only.

#include <string_view>

namespace paci {

inline bool IsDnsLabel(std::string_view name) {
  if (name.empty() || name.size() > 63) return false;
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return name.front() != '-' && name.back() != '-';
}

}  // namespace paci
