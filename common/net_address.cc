#include "common/net_address.h"

#include "absl/strings/match.h"

namespace paci {

std::string HostOfAddress(absl::string_view address) {
  if (absl::StartsWith(address, "[")) {
    const size_t close = address.find(']');
    if (close != absl::string_view::npos) return std::string(address.substr(0, close + 1));
  }
  return std::string(address.substr(0, address.rfind(':')));
}

}  // namespace paci
