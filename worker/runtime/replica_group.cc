#include "worker/runtime/replica_group.h"

#include <glog/logging.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <fcntl.h>

#include <chrono>
#include <cstring>
#include <map>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "common/net_address.h"
#include "common/status_macros.h"

namespace paci {
namespace {

std::chrono::milliseconds Millis(absl::Duration d) {
  return std::chrono::milliseconds(absl::ToInt64Milliseconds(d));
}

// "[::1]" -> "::1", as sockets and Gloo take an IPv6 host; others as they are.
std::string Unbracketed(const std::string& host) {
  return host.size() >= 2 && host.front() == '[' ? host.substr(1, host.size() - 2) : host;
}

// "host:port" -> host without brackets, and the port; false when it has none.
bool SplitAddress(const std::string& address, std::string* host, uint16_t* port) {
  const std::string with_brackets = HostOfAddress(address);
  uint32_t value = 0;
  if (with_brackets.size() + 1 >= address.size() ||
      !absl::SimpleAtoi(address.substr(with_brackets.size() + 1), &value) || value > 65535) {
    return false;
  }
  *host = Unbracketed(with_brackets);
  *port = static_cast<uint16_t>(value);
  return true;
}

// Whether a TCP connection to `address` opens within `timeout`.
bool Answers(const std::string& address, absl::Duration timeout) {
  std::string host;
  uint16_t port = 0;
  if (!SplitAddress(address, &host, &port)) return false;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return false;
  bool open = false;
  for (addrinfo* a = found; a != nullptr && !open; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      open = true;
    } else if (errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int error = 0;
      socklen_t length = sizeof(error);
      open = poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(timeout))) == 1 &&
             getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0 && error == 0;
    }
    close(fd);
  }
  freeaddrinfo(found);
  return open;
}

}  // namespace

struct ReplicaStoreServer::Impl {
  int fd = -1;  // bound, listening once served; the store owns it then
  uint16_t port = 0;
  std::string host;
  absl::Mutex mutex;
  c10::intrusive_ptr<c10d::TCPStore> store ABSL_GUARDED_BY(mutex);
};

ReplicaStoreServer::ReplicaStoreServer(std::unique_ptr<Impl> impl, std::string address)
    : impl_(std::move(impl)), address_(std::move(address)) {}

ReplicaStoreServer::~ReplicaStoreServer() {
  absl::MutexLock lock(&impl_->mutex);
  if (!impl_->store && impl_->fd >= 0) close(impl_->fd);
}

absl::StatusOr<std::unique_ptr<ReplicaStoreServer>> ReplicaStoreServer::Reserve(
    const std::string& advertise_host) {
  auto impl = std::make_unique<Impl>();
  impl->host = advertise_host;
  // Every interface, IPv6 and IPv4 on one socket (IPv4 alone where there is no IPv6).
  impl->fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (impl->fd >= 0) {
    const int off = 0;
    sockaddr_in6 any{};
    any.sin6_family = AF_INET6;
    any.sin6_addr = in6addr_any;
    if (setsockopt(impl->fd, IPPROTO_IPV6, IPV6_V6ONLY, &off, sizeof(off)) != 0 ||
        bind(impl->fd, reinterpret_cast<sockaddr*>(&any), sizeof(any)) != 0) {
      close(impl->fd);
      impl->fd = -1;
    }
  }
  if (impl->fd < 0) {
    impl->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in any{};
    any.sin_family = AF_INET;
    any.sin_addr.s_addr = htonl(INADDR_ANY);
    if (impl->fd < 0 || bind(impl->fd, reinterpret_cast<sockaddr*>(&any), sizeof(any)) != 0) {
      const int error = errno;
      if (impl->fd >= 0) close(impl->fd);
      return absl::UnavailableError(absl::StrCat(
          "cannot reserve a port for the replicas' rendezvous store: ", strerror(error)));
    }
  }
  sockaddr_storage bound{};
  socklen_t length = sizeof(bound);
  getsockname(impl->fd, reinterpret_cast<sockaddr*>(&bound), &length);
  impl->port = ntohs(bound.ss_family == AF_INET6
                         ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                         : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
  const std::string address = absl::StrCat(advertise_host, ":", impl->port);
  return std::unique_ptr<ReplicaStoreServer>(new ReplicaStoreServer(std::move(impl), address));
}

absl::Status ReplicaStoreServer::Serve() {
  absl::MutexLock lock(&impl_->mutex);
  if (impl_->store) return absl::OkStatus();
  if (listen(impl_->fd, SOMAXCONN) != 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve the replicas' rendezvous store on ",
                                               address_, ": listen: ", strerror(errno)));
  }
  c10d::TCPStoreOptions options;
  options.port = impl_->port;
  options.isServer = true;
  options.waitWorkers = false;
  options.masterListenFd = impl_->fd;
  try {
    impl_->store = c10::make_intrusive<c10d::TCPStore>(Unbracketed(impl_->host), options);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("cannot serve the replicas' rendezvous store on ",
                                               address_, ": ", e.what()));
  }
  LOG(INFO) << "serving the replicas' rendezvous store on " << address_;
  return absl::OkStatus();
}

bool ReplicaStoreServer::serving() const {
  absl::MutexLock lock(&impl_->mutex);
  return impl_->store != nullptr;
}

struct ReplicaGroup::Impl {
  c10::intrusive_ptr<c10d::ProcessGroupGloo> group;
};

ReplicaGroup::ReplicaGroup(const ReplicaGroupOptions& options, std::unique_ptr<Impl> impl)
    : options_(options), impl_(std::move(impl)) {}

ReplicaGroup::~ReplicaGroup() = default;

absl::StatusOr<std::unique_ptr<ReplicaGroup>> ReplicaGroup::Join(
    const ReplicaGroupOptions& options) {
  std::string host;
  uint16_t port = 0;
  if (!SplitAddress(options.store_address, &host, &port)) {
    return absl::InvalidArgumentError(
        absl::StrCat("replica store address \"", options.store_address, "\" is not host:port"));
  }
  auto impl = std::make_unique<Impl>();
  std::unique_ptr<ReplicaGroup> group(new ReplicaGroup(options, std::move(impl)));
  try {
    c10d::TCPStoreOptions store_options;
    store_options.port = port;
    store_options.waitWorkers = false;
    store_options.timeout = Millis(options.join_timeout);
    auto store = c10::make_intrusive<c10d::TCPStore>(host, store_options);
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>(
        options.secret.empty() ? options.prefix : absl::StrCat(options.secret, "/", options.prefix),
        store);
    prefixed->setTimeout(Millis(options.join_timeout));
    // Every replica arrives, within join_timeout, before Gloo connects (whose
    // own rendezvous waits as long as a collective may).
    RETURN_IF_ERROR(group->Arrive(*prefixed));
    auto gloo = c10d::ProcessGroupGloo::Options::create(Millis(options.collective_timeout));
    gloo->devices.push_back(
        c10d::ProcessGroupGloo::createDeviceForHostname(Unbracketed(options.hostname)));
    gloo->threads = 1;  // the reduction is small beside a step; one core per stage
    group->impl_->group = c10::make_intrusive<c10d::ProcessGroupGloo>(
        prefixed, options.replica, options.num_replicas, gloo);
  } catch (const std::exception& e) {
    return group->Failed(absl::StrCat("meeting at the store ", options.store_address), e.what());
  }
  return group;
}

absl::Status ReplicaGroup::Arrive(c10d::Store& store) const {
  std::vector<std::string> keys;
  for (int r = 0; r < options_.num_replicas; ++r) keys.push_back(absl::StrCat("arrived/", r));
  store.set(keys[options_.replica], std::vector<uint8_t>{1});
  try {
    store.wait(keys, Millis(options_.join_timeout));
    return absl::OkStatus();
  } catch (const std::exception&) {
    // Timed out: name who is missing, below.
  }
  std::vector<std::string> missing;
  for (int r = 0; r < options_.num_replicas; ++r) {
    if (!store.check({keys[r]})) missing.push_back(absl::StrCat(r));
  }
  if (missing.empty()) return absl::OkStatus();  // the last came just as the wait ended
  return Failed(absl::StrCat("meeting at the store ", options_.store_address),
                absl::StrCat("replica ", absl::StrJoin(missing, ", "), " did not arrive within ",
                             absl::FormatDuration(options_.join_timeout)));
}

absl::Status ReplicaGroup::Average(const std::vector<torch::Tensor>& tensors) {
  torch::NoGradGuard no_grad;
  // One flat host buffer per element type, in the order given.
  std::map<torch::ScalarType, std::vector<const torch::Tensor*>> by_type;
  for (const torch::Tensor& t : tensors) {
    by_type[t.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat].push_back(&t);
  }
  for (auto& [type, group] : by_type) {
    std::vector<torch::Tensor> flat_parts;
    for (const torch::Tensor* t : group) {
      flat_parts.push_back(t->detach().to(torch::kCPU, type).reshape({-1}));
    }
    std::vector<torch::Tensor> buffer{torch::cat(flat_parts)};
    try {
      impl_->group->allreduce(buffer)->wait();
    } catch (const std::exception& e) {
      return Failed("the all-reduce", e.what());
    }
    buffer[0].div_(options_.num_replicas);
    int64_t offset = 0;
    for (const torch::Tensor* t : group) {
      const int64_t n = t->numel();
      t->copy_(buffer[0].slice(0, offset, offset + n).view(t->sizes()));
      offset += n;
    }
  }
  return absl::OkStatus();
}

absl::Status ReplicaGroup::Failed(const std::string& what, const std::string& error) const {
  // A peer killed mid-collective resets its connections before the kernel has closed its
  // listening port, so ask a few times before saying that every peer still answers.
  std::vector<std::string> silent;
  for (int probe = 0; probe < 5 && silent.empty(); ++probe) {
    if (probe > 0) absl::SleepFor(absl::Milliseconds(200));
    if (!Answers(options_.store_address, absl::Seconds(1))) {
      silent.push_back(absl::StrCat("the store at ", options_.store_address));
    }
    for (int r = 0; r < static_cast<int>(options_.peer_addresses.size()); ++r) {
      if (r == options_.replica) continue;
      const std::string& peer = options_.peer_addresses[r];
      if (!Answers(peer, absl::Seconds(1))) {
        silent.push_back(absl::StrCat("replica ", r, " at ", peer));
      }
    }
  }
  // c10d's messages carry a C++ backtrace after their first line.
  const std::string first_line = error.substr(0, error.find('\n'));
  return absl::UnavailableError(absl::StrCat(
      "stage ", options_.stage, " replica ", options_.replica, ": ", what, " with the ",
      options_.num_replicas, " replicas of stage ", options_.stage, " failed (", first_line,
      "); ",
      silent.empty() ? "every peer's worker still answers"
                     : absl::StrCat("not answering: ", absl::StrJoin(silent, ", "))));
}

uint32_t HashTensors(const std::vector<torch::Tensor>& tensors, uint32_t seed) {
  uLong crc = seed;
  for (const torch::Tensor& t : tensors) {
    const torch::Tensor host = t.detach().to(torch::kCPU).contiguous();
    crc = crc32_z(crc, static_cast<const Bytef*>(host.data_ptr()), host.nbytes());
  }
  return static_cast<uint32_t>(crc);
}

}  // namespace paci
