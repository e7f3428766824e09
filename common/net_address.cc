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

bool IsLoopbackHost(absl::string_view host) {
  if (host == "localhost" || host == "[::1]") return true;
  if (!absl::StartsWith(host, "127.")) return false;
  int dots = 0;
  for (char c : host) {
    if (c == '.') {
      ++dots;
    } else if (c < '0' || c > '9') {
      return false;
    }
  }
  return dots == 3;
}

}  // namespace paci
