#pragma once

#include <string>

#include "absl/strings/string_view.h"

namespace paci {

// The host of a "host:port" address, as written: "10.0.0.1:7070" ->
// "10.0.0.1", "[::1]:7070" -> "[::1]" (the brackets stay, so that host + ":"
// + port is an address again). An address without a port is its own host:
// "example.org", "[::1]". An IPv6 host must be in brackets.
std::string HostOfAddress(absl::string_view address);

// Whether a host (as HostOfAddress gives it) is this machine's loopback only:
// "localhost", 127.0.0.0/8 or "[::1]". "0.0.0.0", "[::]" and every other
// address are reachable from elsewhere.
bool IsLoopbackHost(absl::string_view host);

}  // namespace paci
