#pragma once

#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace paci {

// TLS material for a gRPC endpoint. All empty: plaintext (the local default,
// on loopback). Files are PEM.
struct TlsFiles {
  std::string cert_file;  // this endpoint's certificate (servers; clients under mutual TLS)
  std::string key_file;   // its private key
  // The CA that signed the peer: for clients the server's; for servers the
  // clients' (mutual TLS: a client without a certificate it signed is refused).
  std::string ca_file;
  bool enabled() const { return !cert_file.empty() || !ca_file.empty(); }
};

// Whether a server listening on `host` (HostOfAddress of its address) serves
// safely with this security. On loopback anything goes (the local default).
// Elsewhere a server must authenticate its clients, with mutual TLS (a CA in
// `tls`) or TLS and a bearer token: else FailedPrecondition saying what is
// missing and what anyone reaching the port could then do
// (`what_callers_can_do`, e.g. "submit, cancel ..."), and that --insecure
// serves anyway (the caller's flag).
absl::Status CheckExposure(const std::string& host, const TlsFiles& tls, bool has_token,
                           const std::string& what_callers_can_do);

// Server credentials: TLS when cert_file and key_file are given, requiring
// client certificates signed by ca_file when that is given; else insecure.
// InvalidArgument naming the file that cannot be read.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsFiles& tls);

// Channel credentials: TLS trusting ca_file when given, presenting
// cert_file/key_file as the client certificate when given; else insecure.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsFiles& tls);

// Keepalive on coordinator connections: a ping after this long without one,
// and the connection given up when it is not answered within the timeout.
inline constexpr absl::Duration kKeepaliveTime = absl::Seconds(10);
inline constexpr absl::Duration kKeepaliveTimeout = absl::Seconds(5);

// A channel to the coordinator, the one way every client opens one. Its
// answers may be up to kMaxCoordinatorAnswerBytes: a job's timeline
// (GetJobTrace), runtime.trace_max_spans spans per stage, is past gRPC's
// default 4 MiB at 8 stages of 20,000. With `reconnect_quickly`, for the
// processes that must find it again soon after it restarts (workers, the
// operator): gRPC's reconnect backoff starts at 100 ms and is capped at 1 s,
// not its default 1 s growing to 120 s, so a coordinator back within seconds
// is reached within about a second; and keepalive pings (kKeepaliveTime), so
// one that stopped answering is left within about 15 s. Without (pacictl's
// commands): gRPC's own backoff and no pings.
inline constexpr int kMaxCoordinatorAnswerBytes = 1 << 30;
std::shared_ptr<grpc::Channel> CreateCoordinatorChannel(
    const std::string& address, const std::shared_ptr<grpc::ChannelCredentials>& credentials,
    bool reconnect_quickly);

// A channel to a stage link's peer (worker/transport/peer_sender.h), the one
// other kind of channel: messages up to 1 GiB (an activation or gradient
// frame), a connection of its own (not shared with other channels to the same
// address), the peer's certificate checked against `tls_server_name` when
// given, plaintext when `credentials` is null.
std::shared_ptr<grpc::Channel> CreateStageLinkChannel(
    const std::string& address, const std::shared_ptr<grpc::ChannelCredentials>& credentials,
    const std::string& tls_server_name);

// A server's side of the keepalives: it takes its clients' pings (every
// kKeepaliveTime / 2 at most, with or without calls) and pings them itself.
void AllowKeepalivePings(grpc::ServerBuilder& builder);

// Checks "authorization: Bearer <token>" on a call. An empty `token`
// accepts every call. UNAUTHENTICATED otherwise (comparison in constant time).
grpc::Status CheckBearerToken(const grpc::ServerContext& context, const std::string& token);

// Reads a token file (trailing whitespace removed). InvalidArgument when it
// cannot be read or is empty.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path);

}  // namespace paci
