#pragma once

// PEM certificates and keys for the Kubernetes client's TLS, parsed with
// OpenSSL once and shared by the connections that use them. Errors name the
// field the PEM came from (a kubeconfig key, an ExecCredential field).

#include <memory>
#include <string>
#include <vector>

#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace paci::kube {

// The certificates of a PEM bundle (a CA bundle, or a certificate with its
// chain), in order.
class PemCertificates {
 public:
  // InvalidArgument "<field>: ..." when `pem` holds no certificate or a
  // malformed one.
  static absl::StatusOr<std::shared_ptr<const PemCertificates>> Parse(const std::string& pem,
                                                                      absl::string_view field);
  ~PemCertificates();
  PemCertificates(const PemCertificates&) = delete;
  PemCertificates& operator=(const PemCertificates&) = delete;

  const std::vector<X509*>& certificates() const { return certificates_; }
  // A new store holding every certificate; the caller owns it.
  X509_STORE* NewStore() const;

 private:
  PemCertificates() = default;
  std::vector<X509*> certificates_;
};

// A client certificate (the first in its PEM, any further ones its chain)
// and the private key that belongs to it.
class ClientIdentity {
 public:
  // InvalidArgument naming `cert_field` or `key_field`: no certificate, no
  // key, or a key that is not the certificate's.
  static absl::StatusOr<std::shared_ptr<const ClientIdentity>> Parse(
      const std::string& cert_pem, const std::string& key_pem, absl::string_view cert_field,
      absl::string_view key_field);
  ~ClientIdentity();
  ClientIdentity(const ClientIdentity&) = delete;
  ClientIdentity& operator=(const ClientIdentity&) = delete;

  // Presents this identity on connections made with `ctx`.
  bool Install(SSL_CTX* ctx) const;
  // The subject's common name, for messages.
  std::string CommonName() const;

 private:
  ClientIdentity() = default;
  std::shared_ptr<const PemCertificates> certificates_;
  EVP_PKEY* key_ = nullptr;
};

// The text of OpenSSL's error queue for this thread (emptied), "" if none.
std::string TakeOpenSslErrors();

}  // namespace paci::kube
