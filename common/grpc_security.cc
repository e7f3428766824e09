#include "common/grpc_security.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "common/net_address.h"
#include "common/read_file.h"

namespace paci {
namespace {

// A TLS or token file, its errors InvalidArgument naming `what` (a bad flag).
absl::StatusOr<std::string> ReadFile(const std::string& path, const char* what) {
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) return absl::InvalidArgumentError(absl::StrCat(what, ": ", text.status().message()));
  return text;
}

}  // namespace

absl::Status CheckExposure(const std::string& host, const TlsFiles& tls, bool has_token,
                           const std::string& what_callers_can_do) {
  if (IsLoopbackHost(host)) return absl::OkStatus();
  const bool encrypted = !tls.cert_file.empty();
  const bool authenticated = !tls.ca_file.empty() || has_token;
  if (encrypted && authenticated) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "refusing to serve on ", host, " ",
      encrypted ? "without client authentication (--tls_ca for mutual TLS, or --auth_token_file)"
                : "in plaintext (--tls_cert and --tls_key, with --tls_ca for mutual TLS)",
      ": anyone who reaches the port could ", what_callers_can_do,
      ". Give those flags, listen on 127.0.0.1, or pass --insecure to serve so anyway"));
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsFiles& tls) {
  if (tls.cert_file.empty() && tls.key_file.empty()) return grpc::InsecureServerCredentials();
  auto cert = ReadFile(tls.cert_file, "TLS certificate");
  if (!cert.ok()) return cert.status();
  auto key = ReadFile(tls.key_file, "TLS private key");
  if (!key.ok()) return key.status();
  grpc::SslServerCredentialsOptions options;
  options.pem_key_cert_pairs.push_back({*key, *cert});
  if (!tls.ca_file.empty()) {
    auto ca = ReadFile(tls.ca_file, "TLS CA");
    if (!ca.ok()) return ca.status();
    options.pem_root_certs = *ca;
    // A CA on a server means mutual TLS: every client presents a certificate it signed.
    options.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsFiles& tls) {
  if (tls.ca_file.empty()) {
    if (!tls.cert_file.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("client certificate ", tls.cert_file, " given without the server's CA"));
    }
    return grpc::InsecureChannelCredentials();
  }
  auto ca = ReadFile(tls.ca_file, "TLS CA");
  if (!ca.ok()) return ca.status();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = *ca;
  if (!tls.cert_file.empty() || !tls.key_file.empty()) {
    auto cert = ReadFile(tls.cert_file, "TLS client certificate");
    if (!cert.ok()) return cert.status();
    auto key = ReadFile(tls.key_file, "TLS client private key");
    if (!key.ok()) return key.status();
    options.pem_cert_chain = *cert;
    options.pem_private_key = *key;
  }
  return grpc::SslCredentials(options);
}

grpc::Status CheckBearerToken(const grpc::ServerContext& context, const std::string& token) {
  if (token.empty()) return grpc::Status::OK;
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  const std::string expected = "Bearer " + token;
  if (it != metadata.end() && it->second.size() == expected.size()) {
    unsigned char diff = 0;
    for (size_t i = 0; i < expected.size(); ++i) diff |= it->second.data()[i] ^ expected[i];
    if (diff == 0) return grpc::Status::OK;
  }
  return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                      "missing or wrong bearer token (metadata \"authorization: Bearer ...\")");
}

absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  auto text = ReadFile(path, "token file");
  if (!text.ok()) return text.status();
  std::string token(absl::StripTrailingAsciiWhitespace(*text));
  if (token.empty()) return absl::InvalidArgumentError(absl::StrCat("token file ", path, " is empty"));
  return token;
}

std::shared_ptr<grpc::Channel> CreateCoordinatorChannel(
    const std::string& address, const std::shared_ptr<grpc::ChannelCredentials>& credentials,
    bool reconnect_quickly) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxCoordinatorAnswerBytes);
  if (!reconnect_quickly) return grpc::CreateCustomChannel(address, credentials, args);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // Keepalive pings find a coordinator that stopped answering (a frozen
  // process, a partition) though its connection looks open.
  args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, absl::ToInt64Milliseconds(kKeepaliveTime));
  args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, absl::ToInt64Milliseconds(kKeepaliveTimeout));
  args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  return grpc::CreateCustomChannel(address, credentials, args);
}

std::shared_ptr<grpc::Channel> CreateStageLinkChannel(
    const std::string& address, const std::shared_ptr<grpc::ChannelCredentials>& credentials,
    const std::string& tls_server_name) {
  grpc::ChannelArguments args;
  if (!tls_server_name.empty()) args.SetSslTargetNameOverride(tls_server_name);
  args.SetMaxSendMessageSize(1 << 30);
  args.SetMaxReceiveMessageSize(1 << 30);
  // One connection per link; keep it from being shared with other channels.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  return grpc::CreateCustomChannel(
      address, credentials ? credentials : grpc::InsecureChannelCredentials(), args);
}

void AllowKeepalivePings(grpc::ServerBuilder& builder) {
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS,
                             static_cast<int>(absl::ToInt64Milliseconds(kKeepaliveTime / 2)));
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  // The server pings its clients too: a worker that froze loses its stream.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS,
                             static_cast<int>(absl::ToInt64Milliseconds(kKeepaliveTime)));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                             static_cast<int>(absl::ToInt64Milliseconds(kKeepaliveTimeout)));
}

}  // namespace paci
