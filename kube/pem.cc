#include "kube/pem.h"

#include <openssl/err.h>
#include <openssl/pem.h>

#include "absl/strings/str_cat.h"

namespace paci::kube {
namespace {

// No passphrase prompts: an encrypted key is an error, never a question on a
// terminal.
int NoPassphrase(char*, int, int, void*) { return 0; }

struct BioDeleter {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
using BioPtr = std::unique_ptr<BIO, BioDeleter>;

BioPtr MemoryBio(const std::string& text) {
  return BioPtr(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

// True when the last PEM read stopped because no further PEM block follows
// (the normal end of a bundle) rather than on a malformed one.
bool AtEndOfPem() {
  const unsigned long error = ERR_peek_last_error();
  return error == 0 ||
         (ERR_GET_LIB(error) == ERR_LIB_PEM && ERR_GET_REASON(error) == PEM_R_NO_START_LINE);
}

}  // namespace

std::string TakeOpenSslErrors() {
  std::string out;
  while (const unsigned long error = ERR_get_error()) {
    char text[256];
    ERR_error_string_n(error, text, sizeof(text));
    absl::StrAppend(&out, out.empty() ? "" : "; ", text);
  }
  return out;
}

absl::StatusOr<std::shared_ptr<const PemCertificates>> PemCertificates::Parse(
    const std::string& pem, absl::string_view field) {
  std::shared_ptr<PemCertificates> parsed(new PemCertificates());
  BioPtr bio = MemoryBio(pem);
  ERR_clear_error();
  while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, NoPassphrase, nullptr)) {
    parsed->certificates_.push_back(cert);
  }
  if (!AtEndOfPem()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": a malformed PEM certificate (", TakeOpenSslErrors(), ")"));
  }
  ERR_clear_error();
  if (parsed->certificates_.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ": no PEM certificate (\"-----BEGIN CERTIFICATE-----\")"));
  }
  return std::shared_ptr<const PemCertificates>(std::move(parsed));
}

PemCertificates::~PemCertificates() {
  for (X509* cert : certificates_) X509_free(cert);
}

X509_STORE* PemCertificates::NewStore() const {
  X509_STORE* store = X509_STORE_new();
  for (X509* cert : certificates_) X509_STORE_add_cert(store, cert);
  return store;
}

absl::StatusOr<std::shared_ptr<const ClientIdentity>> ClientIdentity::Parse(
    const std::string& cert_pem, const std::string& key_pem, absl::string_view cert_field,
    absl::string_view key_field) {
  std::shared_ptr<ClientIdentity> identity(new ClientIdentity());
  absl::StatusOr<std::shared_ptr<const PemCertificates>> certificates =
      PemCertificates::Parse(cert_pem, cert_field);
  if (!certificates.ok()) return certificates.status();
  identity->certificates_ = *std::move(certificates);

  BioPtr bio = MemoryBio(key_pem);
  ERR_clear_error();
  identity->key_ = PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassphrase, nullptr);
  if (identity->key_ == nullptr) {
    const std::string errors = TakeOpenSslErrors();
    const bool encrypted = key_pem.find("ENCRYPTED") != std::string::npos;
    return absl::InvalidArgumentError(absl::StrCat(
        key_field,
        encrypted ? ": an encrypted private key (a passphrase cannot be given)"
                  : ": no PEM private key (\"-----BEGIN PRIVATE KEY-----\")",
        errors.empty() ? "" : absl::StrCat(" (", errors, ")")));
  }
  X509* leaf = identity->certificates_->certificates().front();
  if (X509_check_private_key(leaf, identity->key_) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat(key_field,
                                                   ": the private key is not the one of ",
                                                   cert_field, " (CN=", identity->CommonName(),
                                                   ")"));
  }
  return std::shared_ptr<const ClientIdentity>(std::move(identity));
}

ClientIdentity::~ClientIdentity() {
  if (key_ != nullptr) EVP_PKEY_free(key_);
}

bool ClientIdentity::Install(SSL_CTX* ctx) const {
  const std::vector<X509*>& certs = certificates_->certificates();
  if (SSL_CTX_use_certificate(ctx, certs.front()) != 1) return false;
  for (size_t i = 1; i < certs.size(); ++i) {
    if (SSL_CTX_add1_chain_cert(ctx, certs[i]) != 1) return false;
  }
  return SSL_CTX_use_PrivateKey(ctx, key_) == 1;
}

std::string ClientIdentity::CommonName() const {
  X509_NAME* subject = X509_get_subject_name(certificates_->certificates().front());
  char name[256] = {0};
  if (subject == nullptr ||
      X509_NAME_get_text_by_NID(subject, NID_commonName, name, sizeof(name)) < 0) {
    return "";
  }
  return name;
}

}  // namespace paci::kube
