// LoadKubeconfig and InClusterConfig: where the client's server and
// credentials come from, read as client-go reads them (tools/clientcmd).

#include <filesystem>

#include <yaml-cpp/yaml.h>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/read_file.h"
#include "common/status_macros.h"
#include "common/yaml_json.h"
#include "kube/kube_client.h"
#include "kube/pem.h"

namespace paci::kube {
namespace {

using nlohmann::json;

// The key of a cluster's extensions that client-go hands an exec plugin as
// spec.cluster.config.
constexpr char kExecClusterExtension[] = "client.authentication.k8s.io/exec";

absl::Status Field(const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat(field, ": ", what));
}

// A scalar, as text; "" when absent or null.
absl::StatusOr<std::string> String(const YAML::Node& parent, const char* key,
                                   const std::string& field) {
  const YAML::Node node = parent[key];
  if (!node || node.IsNull()) return std::string();
  if (!node.IsScalar()) return Field(field, "not a string");
  return node.Scalar();
}

absl::StatusOr<bool> Bool(const YAML::Node& parent, const char* key, const std::string& field) {
  const YAML::Node node = parent[key];
  if (!node || node.IsNull()) return false;
  bool value = false;
  if (!node.IsScalar() || !YAML::convert<bool>::decode(node, value)) {
    return Field(field, "not true or false");
  }
  return value;
}

absl::StatusOr<std::string> Base64(const std::string& text, const std::string& field) {
  std::string decoded;
  if (!absl::Base64Unescape(text, &decoded)) return Field(field, "not valid base64");
  return decoded;
}

// The named entry of a list (contexts, clusters, users) and its index.
struct Named {
  YAML::Node node;
  int index = -1;
};

Named FindNamed(const YAML::Node& config, const char* list, const std::string& name) {
  int index = 0;
  for (const YAML::Node& entry : config[list]) {
    if (entry.IsMap() && entry["name"] && entry["name"].IsScalar() &&
        entry["name"].Scalar() == name) {
      return Named{entry, index};
    }
    ++index;
  }
  return Named{};
}

// Paths in a kubeconfig are relative to its folder (clientcmd ResolvePaths).
class Resolver {
 public:
  explicit Resolver(const std::string& kubeconfig)
      : base_(std::filesystem::absolute(kubeconfig).parent_path()) {}
  std::string operator()(const std::string& path) const {
    if (path.empty() || path.front() == '/') return path;
    return (base_ / path).lexically_normal().string();
  }

 private:
  std::filesystem::path base_;
};

// users[i].user.exec.
absl::StatusOr<ExecPluginConfig> ReadExec(const YAML::Node& exec, const std::string& at,
                                          const Resolver& resolve) {
  if (!exec.IsMap()) return Field(at, "not a map");
  ExecPluginConfig config;
  ASSIGN_OR_RETURN(config.api_version, String(exec, "apiVersion", at + ".apiVersion"));
  if (config.api_version.empty()) return Field(at + ".apiVersion", "required");
  if (config.api_version != kExecApiV1 && config.api_version != kExecApiV1Beta1) {
    return Field(at + ".apiVersion", absl::StrCat("\"", config.api_version, "\" is not ",
                                                  kExecApiV1, " or ", kExecApiV1Beta1));
  }
  ASSIGN_OR_RETURN(config.command, String(exec, "command", at + ".command"));
  if (config.command.empty()) return Field(at + ".command", "required");
  // Only a command with a '/' is a path; others are looked up in PATH.
  if (config.command.find('/') != std::string::npos) config.command = resolve(config.command);
  if (const YAML::Node args = exec["args"]; args && !args.IsNull()) {
    if (!args.IsSequence()) return Field(at + ".args", "not a list");
    for (size_t i = 0; i < args.size(); ++i) {
      if (!args[i].IsScalar()) return Field(absl::StrCat(at, ".args[", i, "]"), "not a string");
      config.args.push_back(args[i].Scalar());
    }
  }
  if (const YAML::Node env = exec["env"]; env && !env.IsNull()) {
    if (!env.IsSequence()) return Field(at + ".env", "not a list");
    for (size_t i = 0; i < env.size(); ++i) {
      const std::string entry = absl::StrCat(at, ".env[", i, "]");
      if (!env[i].IsMap()) return Field(entry, "not a map with name and value");
      ASSIGN_OR_RETURN(std::string name, String(env[i], "name", entry + ".name"));
      ASSIGN_OR_RETURN(std::string value, String(env[i], "value", entry + ".value"));
      if (name.empty()) return Field(entry + ".name", "required");
      config.env.emplace_back(name, value);
    }
  }
  ASSIGN_OR_RETURN(config.install_hint, String(exec, "installHint", at + ".installHint"));
  ASSIGN_OR_RETURN(config.interactive_mode,
                   String(exec, "interactiveMode", at + ".interactiveMode"));
  if (config.interactive_mode.empty()) {
    // client-go defaults it for v1beta1 only; v1 must say.
    if (config.api_version != kExecApiV1Beta1) {
      return Field(at + ".interactiveMode",
                   absl::StrCat("required with ", config.api_version,
                                " (Never, IfAvailable or Always)"));
    }
    config.interactive_mode = "IfAvailable";
  }
  if (config.interactive_mode != "Never" && config.interactive_mode != "IfAvailable" &&
      config.interactive_mode != "Always") {
    return Field(at + ".interactiveMode", absl::StrCat("\"", config.interactive_mode,
                                                       "\" is not Never, IfAvailable or Always"));
  }
  return config;
}

// The cluster entry of a context: the server and how to trust it, into
// `options`; its node, where it stands, and the CA's PEM for the exec plugin.
struct ClusterEntry {
  YAML::Node node;
  std::string at;
  std::string ca_pem;
};

absl::StatusOr<ClusterEntry> ReadCluster(const YAML::Node& config, const std::string& name,
                                         const std::string& context_name, const Resolver& resolve,
                                         KubeClientOptions& options) {
  const Named cluster = FindNamed(config, "clusters", name);
  if (!cluster.node || !cluster.node["cluster"] || !cluster.node["cluster"].IsMap()) {
    return absl::InvalidArgumentError(absl::StrCat("cluster \"", name, "\" of context \"",
                                                   context_name, "\" is not defined"));
  }
  ClusterEntry entry{cluster.node["cluster"], absl::StrCat("clusters[", cluster.index, "].cluster"),
                     ""};
  const YAML::Node& c = entry.node;
  const std::string& c_at = entry.at;
  ASSIGN_OR_RETURN(options.server, String(c, "server", c_at + ".server"));
  if (options.server.empty()) return Field(c_at + ".server", "required");
  ASSIGN_OR_RETURN(std::string ca_file,
                   String(c, "certificate-authority", c_at + ".certificate-authority"));
  ASSIGN_OR_RETURN(std::string ca_data_b64, String(c, "certificate-authority-data",
                                                   c_at + ".certificate-authority-data"));
  if (!ca_file.empty() && !ca_data_b64.empty()) {
    return Field(c_at, "certificate-authority and certificate-authority-data are both given");
  }
  if (!ca_file.empty()) {
    options.ca_file = resolve(ca_file);
    absl::StatusOr<std::string> text = ReadFileToString(options.ca_file);
    if (!text.ok()) {
      return Field(c_at + ".certificate-authority", std::string(text.status().message()));
    }
    entry.ca_pem = *text;
    RETURN_IF_ERROR(
        PemCertificates::Parse(entry.ca_pem, c_at + ".certificate-authority " + options.ca_file)
            .status());
  }
  if (!ca_data_b64.empty()) {
    ASSIGN_OR_RETURN(options.ca_data, Base64(ca_data_b64, c_at + ".certificate-authority-data"));
    entry.ca_pem = options.ca_data;
    RETURN_IF_ERROR(
        PemCertificates::Parse(entry.ca_pem, c_at + ".certificate-authority-data").status());
  }
  ASSIGN_OR_RETURN(options.insecure_skip_tls_verify,
                   Bool(c, "insecure-skip-tls-verify", c_at + ".insecure-skip-tls-verify"));
  if (options.insecure_skip_tls_verify && !entry.ca_pem.empty()) {
    return Field(c_at, "insecure-skip-tls-verify with a certificate-authority: not both "
                       "(kubectl refuses it too)");
  }
  for (const char* key : {"tls-server-name", "proxy-url"}) {
    ASSIGN_OR_RETURN(std::string value, String(c, key, absl::StrCat(c_at, ".", key)));
    if (!value.empty()) {
      return absl::UnimplementedError(
          absl::StrCat(c_at, ".", key, ": not supported by this client"));
    }
  }
  return entry;
}

// Ways of authenticating that client-go dropped or this client does not
// offer, refused by name.
absl::Status RefuseUnsupportedAuth(const YAML::Node& u, const std::string& u_at) {
  for (const char* key : {"username", "password"}) {
    if (u[key]) {
      return absl::UnimplementedError(
          absl::StrCat(u_at, ".", key,
                       ": basic authentication is not supported (Kubernetes 1.19 removed it)"));
    }
  }
  if (u["auth-provider"]) {
    return absl::UnimplementedError(absl::StrCat(
        u_at, ".auth-provider: not supported (client-go removed the built-in providers); "
              "use an exec credential plugin"));
  }
  for (const char* key : {"as", "as-uid", "as-groups", "as-user-extra"}) {
    if (u[key]) {
      return absl::UnimplementedError(
          absl::StrCat(u_at, ".", key, ": impersonation is not supported"));
    }
  }
  return absl::OkStatus();
}

// The bearer token, inline or in a file (read now, so a missing or empty
// file is named at start-up).
absl::Status ReadToken(const YAML::Node& u, const std::string& u_at, const Resolver& resolve,
                       KubeClientOptions& options) {
  ASSIGN_OR_RETURN(options.bearer_token, String(u, "token", u_at + ".token"));
  ASSIGN_OR_RETURN(std::string token_file, String(u, "tokenFile", u_at + ".tokenFile"));
  if (token_file.empty()) return absl::OkStatus();
  options.token_file = resolve(token_file);
  absl::StatusOr<std::string> token = ReadFileToString(options.token_file);
  if (!token.ok()) return Field(u_at + ".tokenFile", std::string(token.status().message()));
  if (absl::StripAsciiWhitespace(*token).empty()) {
    return Field(u_at + ".tokenFile", absl::StrCat(options.token_file, " is empty"));
  }
  // The token given inline serves until the file is read (client-go).
  if (options.bearer_token.empty()) {
    options.bearer_token = std::string(absl::StripAsciiWhitespace(*token));
  }
  return absl::OkStatus();
}

// The client certificate and key, each a file or data (not both), checked to
// be a matching pair. Returns whether a certificate was given.
absl::StatusOr<bool> ReadClientCertificate(const YAML::Node& u, const std::string& u_at,
                                           const Resolver& resolve, KubeClientOptions& options) {
  struct Half {
    const char* file_key;
    const char* data_key;
    std::string* file;
    std::string* data;
    std::string pem;
    std::string field;
  };
  Half halves[2] = {
      {"client-certificate", "client-certificate-data", &options.client_cert_file,
       &options.client_cert_data, "", ""},
      {"client-key", "client-key-data", &options.client_key_file, &options.client_key_data, "",
       ""},
  };
  for (Half& half : halves) {
    const std::string file_at = absl::StrCat(u_at, ".", half.file_key);
    const std::string data_at = absl::StrCat(u_at, ".", half.data_key);
    ASSIGN_OR_RETURN(std::string file, String(u, half.file_key, file_at));
    ASSIGN_OR_RETURN(std::string data, String(u, half.data_key, data_at));
    if (!file.empty() && !data.empty()) {
      return Field(u_at, absl::StrCat(half.file_key, " and ", half.data_key, " are both given"));
    }
    if (!file.empty()) {
      *half.file = resolve(file);
      absl::StatusOr<std::string> text = ReadFileToString(*half.file);
      if (!text.ok()) return Field(file_at, std::string(text.status().message()));
      half.pem = *text;
      half.field = absl::StrCat(file_at, " ", *half.file);
    } else if (!data.empty()) {
      ASSIGN_OR_RETURN(*half.data, Base64(data, data_at));
      half.pem = *half.data;
      half.field = data_at;
    }
  }
  if (halves[0].pem.empty() && halves[1].pem.empty()) return false;
  if (halves[1].pem.empty()) {
    return Field(u_at, "client-certificate needs client-key or client-key-data");
  }
  if (halves[0].pem.empty()) {
    return Field(u_at, "client-key needs client-certificate or client-certificate-data");
  }
  RETURN_IF_ERROR(
      ClientIdentity::Parse(halves[0].pem, halves[1].pem, halves[0].field, halves[1].field)
          .status());
  return true;
}

// The exec plugin, checked in any case and used when neither a token nor a
// certificate is given (client-go's UpdateTransportConfig).
absl::Status ReadExecPlugin(const YAML::Node& exec, const std::string& u_at,
                            const Resolver& resolve, const ClusterEntry& cluster,
                            bool other_credentials, KubeClientOptions& options) {
  ASSIGN_OR_RETURN(ExecPluginConfig plugin, ReadExec(exec, u_at + ".exec", resolve));
  ASSIGN_OR_RETURN(bool provide_cluster_info,
                   Bool(exec, "provideClusterInfo", u_at + ".exec.provideClusterInfo"));
  if (provide_cluster_info) {
    plugin.cluster = {{"server", options.server}};
    if (options.insecure_skip_tls_verify) plugin.cluster["insecure-skip-tls-verify"] = true;
    if (!cluster.ca_pem.empty()) {
      plugin.cluster["certificate-authority-data"] = absl::Base64Escape(cluster.ca_pem);
    }
    for (const YAML::Node& extension : cluster.node["extensions"]) {
      if (extension.IsMap() && extension["name"] && extension["name"].IsScalar() &&
          extension["name"].Scalar() == kExecClusterExtension && extension["extension"]) {
        const std::string at =
            absl::StrCat(cluster.at, ".extensions[", kExecClusterExtension, "].extension");
        ASSIGN_OR_RETURN(const std::string config, YamlNodeToJson(extension["extension"], at));
        plugin.cluster["config"] = json::parse(config, nullptr, /*allow_exceptions=*/false);
        if (plugin.cluster["config"].is_discarded()) {  // a number past a double's range
          return Field(at, "not representable as JSON");
        }
      }
    }
  }
  if (!other_credentials) {
    options.exec_plugin = std::make_shared<ExecCredentialPlugin>(std::move(plugin));
  }
  return absl::OkStatus();
}

// The user entry of a context: its credentials, into `options`.
absl::Status ReadUser(const YAML::Node& config, const std::string& name,
                      const std::string& context_name, const Resolver& resolve,
                      const ClusterEntry& cluster, KubeClientOptions& options) {
  if (name.empty()) return absl::OkStatus();  // no credentials
  const Named user = FindNamed(config, "users", name);
  if (!user.node) {
    return absl::InvalidArgumentError(absl::StrCat("user \"", name, "\" of context \"",
                                                   context_name, "\" is not defined"));
  }
  const YAML::Node u = user.node["user"];
  if (!u || u.IsNull()) return absl::OkStatus();
  const std::string u_at = absl::StrCat("users[", user.index, "].user");
  if (!u.IsMap()) return Field(u_at, "not a map");
  RETURN_IF_ERROR(RefuseUnsupportedAuth(u, u_at));
  RETURN_IF_ERROR(ReadToken(u, u_at, resolve, options));
  ASSIGN_OR_RETURN(bool certificate, ReadClientCertificate(u, u_at, resolve, options));
  if (const YAML::Node exec = u["exec"]; exec && !exec.IsNull()) {
    const bool other =
        !options.bearer_token.empty() || !options.token_file.empty() || certificate;
    RETURN_IF_ERROR(ReadExecPlugin(exec, u_at, resolve, cluster, other, options));
  }
  return absl::OkStatus();
}

// The current context's cluster and user; errors name the field.
absl::StatusOr<KubeClientOptions> ReadKubeconfig(const YAML::Node& config,
                                                 const Resolver& resolve) {
  if (!config.IsMap()) return absl::InvalidArgumentError("not a map");
  ASSIGN_OR_RETURN(std::string context_name,
                   String(config, "current-context", "current-context"));
  if (context_name.empty()) return absl::InvalidArgumentError("no current-context");
  const Named context = FindNamed(config, "contexts", context_name);
  if (!context.node || !context.node["context"] || !context.node["context"].IsMap()) {
    return absl::InvalidArgumentError(
        absl::StrCat("context \"", context_name, "\" is not defined"));
  }
  const YAML::Node ctx = context.node["context"];
  const std::string ctx_at = absl::StrCat("contexts[", context.index, "].context");
  KubeClientOptions options;
  ASSIGN_OR_RETURN(std::string ns, String(ctx, "namespace", ctx_at + ".namespace"));
  if (!ns.empty()) options.default_namespace = ns;
  ASSIGN_OR_RETURN(std::string cluster_name, String(ctx, "cluster", ctx_at + ".cluster"));
  ASSIGN_OR_RETURN(std::string user_name, String(ctx, "user", ctx_at + ".user"));
  ASSIGN_OR_RETURN(ClusterEntry cluster,
                   ReadCluster(config, cluster_name, context_name, resolve, options));
  RETURN_IF_ERROR(ReadUser(config, user_name, context_name, resolve, cluster, options));
  return options;
}

}  // namespace

absl::StatusOr<KubeClientOptions> LoadKubeconfig(const std::string& path) {
  YAML::Node config;
  try {
    config = YAML::LoadFile(path);
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("kubeconfig ", path, ": ", e.what()));
  }
  absl::StatusOr<KubeClientOptions> options = ReadKubeconfig(config, Resolver(path));
  if (!options.ok()) {
    return absl::Status(options.status().code(),
                        absl::StrCat("kubeconfig ", path, ": ", options.status().message()));
  }
  return options;
}

absl::StatusOr<KubeClientOptions> InClusterConfig(const std::string& host, const std::string& port,
                                                  const std::string& account_dir) {
  if (host.empty() || port.empty()) {
    return absl::FailedPreconditionError(
        "not in a cluster: KUBERNETES_SERVICE_HOST/PORT are not set; pass --kubeconfig");
  }
  KubeClientOptions options;
  options.server = host.find(':') != std::string::npos
                       ? absl::StrCat("https://[", host, "]:", port)  // IPv6
                       : absl::StrCat("https://", host, ":", port);
  options.token_file = account_dir + "/token";
  absl::StatusOr<std::string> token = ReadFileToString(options.token_file);
  options.bearer_token =
      token.ok() ? std::string(absl::StripTrailingAsciiWhitespace(*token)) : std::string();
  if (options.bearer_token.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no service account token in ", account_dir, "/token"));
  }
  options.ca_file = account_dir + "/ca.crt";
  absl::StatusOr<std::string> ns = ReadFileToString(account_dir + "/namespace");
  if (ns.ok() && !absl::StripTrailingAsciiWhitespace(*ns).empty()) {
    options.default_namespace = std::string(absl::StripTrailingAsciiWhitespace(*ns));
  }
  return options;
}

}  // namespace paci::kube
