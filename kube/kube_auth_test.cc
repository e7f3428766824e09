// How the client authenticates, against real TLS and real processes: client
// certificates (files relative to the kubeconfig, or data) presented to an
// HTTPS server that requires them, certificates made here with openssl; exec
// credential plugins (shell scripts) whose tokens an HTTP server records;
// kubeconfig mistakes named by their key.

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/notification.h"
#include "common/clock.h"
#include "common/test_files.h"
#include "kube/kube_client.h"

namespace paci::kube {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

namespace fs = std::filesystem;

void WriteText(const std::string& path, const std::string& text, mode_t mode = 0600) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
  chmod(path.c_str(), mode);
}

std::string TempDir(const char* what) {
  std::string pattern = absl::StrCat(fs::temp_directory_path().string(), "/paci-", what, "-XXXXXX");
  return mkdtemp(pattern.data());
}

// A CA, a server certificate for 127.0.0.1 and a client certificate it
// signed (CN paci-test-user), plus another CA and a client it signed.
class Pki {
 public:
  static const Pki& Get() {
    static const Pki pki;  // made once; removed at exit
    return pki;
  }
  ~Pki() { fs::remove_all(dir); }
  std::string dir;
  std::string Path(const std::string& name) const { return dir + "/" + name; }
  std::string Text(const std::string& name) const { return ReadText(Path(name)); }
  std::string Base64(const std::string& name) const { return absl::Base64Escape(Text(name)); }

 private:
  Pki() : dir(TempDir("pki")) {
    const std::string key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";
    std::string script = absl::StrCat("set -e; cd '", dir, "'\n");
    for (const char* ca : {"ca", "other-ca"}) {
      absl::StrAppend(&script, "openssl req -x509 ", key, " -days 2 -subj /CN=", ca, " -keyout ",
                      ca, ".key -out ", ca, ".crt\n");
    }
    for (const auto& [who, ca, cn, ext] :
         {std::tuple{"server", "ca", "127.0.0.1",
                     "subjectAltName=IP:127.0.0.1,DNS:localhost\\nextendedKeyUsage=serverAuth"},
          {"client", "ca", "paci-test-user", "extendedKeyUsage=clientAuth"},
          {"other-client", "other-ca", "paci-stranger", "extendedKeyUsage=clientAuth"}}) {
      absl::StrAppend(&script, "openssl req ", key, " -subj /CN=", cn, " -keyout ", who,
                      ".key -out ", who, ".csr\n", "printf '", ext, "\\n' > ", who, ".ext\n",
                      "openssl x509 -req -in ", who, ".csr -CA ", ca, ".crt -CAkey ", ca,
                      ".key -CAcreateserial -days 2 -extfile ", who, ".ext -out ", who, ".crt\n");
    }
    const std::string command =
        absl::StrCat("/bin/sh '", dir, "/make.sh' >'", dir, "/openssl.log' 2>&1");
    WriteText(dir + "/make.sh", script);
    const int rc = std::system(command.c_str());
    if (rc != 0) ADD_FAILURE() << "openssl failed: " << ReadText(dir + "/openssl.log");
  }
};

// Serves an httplib server on 127.0.0.1 from a thread of its own until
// destroyed. httplib makes its task queue once its accept loop runs, when
// is_running() is true and stop() will end the loop: that is the readiness
// event waited for, with a bound.
class Serving {
 public:
  explicit Serving(httplib::Server& server) : server_(server) {
    server_.new_task_queue = [this] {
      accepting_.Notify();
      return new httplib::ThreadPool(CPPHTTPLIB_THREAD_POOL_COUNT);
    };
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    if (port_ > 0) ready_ = accepting_.WaitForNotificationWithTimeout(absl::Seconds(30));
  }
  ~Serving() {
    server_.stop();
    thread_.join();
  }
  bool ready() const { return ready_; }
  int port() const { return port_; }

 private:
  httplib::Server& server_;
  absl::Notification accepting_;
  int port_ = 0;
  bool ready_ = false;
  std::thread thread_;
};

// An HTTPS server that requires a client certificate signed by Pki's CA and
// answers every GET with the subject's CN.
class TlsServer {
 public:
  TlsServer()
      : server_(Pki::Get().Path("server.crt").c_str(), Pki::Get().Path("server.key").c_str(),
                Pki::Get().Path("ca.crt").c_str()) {
    server_.Get(".*", [](const httplib::Request& request, httplib::Response& response) {
      std::string cn;
      if (X509* peer = SSL_get1_peer_certificate(request.ssl)) {
        char name[256] = {0};
        X509_NAME_get_text_by_NID(X509_get_subject_name(peer), NID_commonName, name, sizeof(name));
        cn = name;
        X509_free(peer);
      }
      response.set_content(json{{"user", cn}, {"path", request.path}}.dump(), "application/json");
    });
    serving_ = std::make_unique<Serving>(server_);
  }
  bool valid() const { return server_.is_valid() && serving_->ready(); }
  std::string url() const { return absl::StrCat("https://127.0.0.1:", serving_->port()); }

 private:
  httplib::SSLServer server_;
  std::unique_ptr<Serving> serving_;  // after server_: stops before it goes
};

// A plain HTTP server that records the Authorization header of every request
// and answers 401 to the tokens it is told to refuse.
class RecordingServer {
 public:
  RecordingServer() {
    server_.Get(".*", [this](const httplib::Request& request, httplib::Response& response) {
      const std::string authorization = request.get_header_value("Authorization");
      std::lock_guard<std::mutex> lock(mutex_);
      seen_.push_back(authorization);
      paths_.push_back(request.path);
      if (refused_.count(authorization) > 0) {
        response.status = 401;
        response.set_content(R"({"kind":"Status","message":"Unauthorized","code":401})",
                             "application/json");
        return;
      }
      response.set_content(R"({"kind":"Pod"})", "application/json");
    });
    serving_ = std::make_unique<Serving>(server_);
  }
  bool ready() const { return serving_->ready(); }
  std::string url() const { return absl::StrCat("http://127.0.0.1:", serving_->port()); }
  std::vector<std::string> seen() {
    std::lock_guard<std::mutex> lock(mutex_);
    return seen_;
  }
  std::vector<std::string> paths() {
    std::lock_guard<std::mutex> lock(mutex_);
    return paths_;
  }
  void Refuse(const std::string& authorization) {
    std::lock_guard<std::mutex> lock(mutex_);
    refused_.insert(authorization);
  }

 private:
  httplib::Server server_;
  std::mutex mutex_;
  std::vector<std::string> seen_;
  std::vector<std::string> paths_;
  std::set<std::string> refused_;
  std::unique_ptr<Serving> serving_;  // last: stops before the rest goes
};

// A kubeconfig with one context, its cluster and user given as YAML flow
// maps (the user's may be "{}").
std::string Kubeconfig(const std::string& cluster, const std::string& user) {
  return absl::StrCat("apiVersion: v1\nkind: Config\ncurrent-context: t\n",
                      "contexts:\n- name: t\n  context: {cluster: c, user: u, namespace: ns1}\n",
                      "clusters:\n- name: c\n  cluster: ", cluster, "\n",
                      "users:\n- name: u\n  user: ", user, "\n");
}

class KubeAuthTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = TempDir("kubeauth"); }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes the kubeconfig into a folder of the test's own, so that relative
  // paths resolve against it and not against the working directory.
  absl::StatusOr<KubeClientOptions> Load(const std::string& text) {
    const std::string path = dir_ + "/config/kubeconfig";
    WriteText(path, text);
    return LoadKubeconfig(path);
  }
  // Puts Pki's `name` at <dir>/config/<relative>.
  void CopyPki(const std::string& name, const std::string& relative) {
    WriteText(dir_ + "/config/" + relative, Pki::Get().Text(name));
  }

  std::string dir_;
};

// -- client certificates --------------------------------------------------

TEST_F(KubeAuthTest, ClientCertificateFilesAreRelativeToTheKubeconfigFolder) {
  ASSERT_FALSE(Pki::Get().Text("client.crt").empty());
  TlsServer server;
  ASSERT_TRUE(server.valid());
  CopyPki("ca.crt", "pki/ca.crt");
  CopyPki("client.crt", "pki/client.crt");
  CopyPki("client.key", "pki/client.key");
  absl::StatusOr<KubeClientOptions> options =
      Load(Kubeconfig(
          absl::StrCat("{server: '", server.url(), "', certificate-authority: pki/ca.crt}"),
          "{client-certificate: pki/client.crt, client-key: ./pki/client.key}"));
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->client_cert_file, dir_ + "/config/pki/client.crt");
  EXPECT_EQ(options->client_key_file, dir_ + "/config/pki/client.key");
  EXPECT_EQ(options->ca_file, dir_ + "/config/pki/ca.crt");
  EXPECT_EQ(options->exec_plugin, nullptr);
  KubeClient client(*options);
  absl::StatusOr<json> answer = client.Get("/api/v1/namespaces/ns1/pods/p");
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ((*answer)["user"], "paci-test-user");
  EXPECT_EQ((*answer)["path"], "/api/v1/namespaces/ns1/pods/p");
}

TEST_F(KubeAuthTest, ClientCertificateDataAndCaDataAreUsedAsGiven) {
  TlsServer server;
  ASSERT_TRUE(server.valid());
  const Pki& pki = Pki::Get();
  absl::StatusOr<KubeClientOptions> options = Load(Kubeconfig(
      absl::StrCat("{server: '", server.url(),
                   "', certificate-authority-data: ", pki.Base64("ca.crt"), "}"),
      absl::StrCat("{client-certificate-data: ", pki.Base64("client.crt"),
                   ", client-key-data: ", pki.Base64("client.key"), "}")));
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->client_cert_data, pki.Text("client.crt"));
  EXPECT_EQ(options->client_key_data, pki.Text("client.key"));
  EXPECT_TRUE(options->client_cert_file.empty());
  KubeClient client(*options);
  for (int i = 0; i < 2; ++i) {  // the parsed certificate serves each connection
    absl::StatusOr<json> answer = client.Get("/api/v1/namespaces");
    ASSERT_TRUE(answer.ok()) << answer.status();
    EXPECT_EQ((*answer)["user"], "paci-test-user");
  }
}

TEST_F(KubeAuthTest, WithoutAnAcceptedClientCertificateTheServerRefuses) {
  TlsServer server;
  ASSERT_TRUE(server.valid());
  const Pki& pki = Pki::Get();
  const std::string cluster = absl::StrCat(
      "{server: '", server.url(), "', certificate-authority-data: ", pki.Base64("ca.crt"), "}");
  // No certificate: the server closes the connection after the handshake.
  absl::StatusOr<KubeClientOptions> anonymous = Load(Kubeconfig(cluster, "{}"));
  ASSERT_TRUE(anonymous.ok()) << anonymous.status();
  absl::Status refused = KubeClient(*anonymous).Get("/api").status();
  EXPECT_TRUE(absl::IsUnavailable(refused)) << refused;
  EXPECT_THAT(refused.message(), HasSubstr("no credentials were presented (a server that "
                                           "requires a client certificate closes the connection)"))
      << refused;
  EXPECT_THAT(refused.message(), HasSubstr(server.url() + "/api"));
  // A certificate from a CA the server does not trust is refused too.
  absl::StatusOr<KubeClientOptions> stranger = Load(Kubeconfig(
      cluster, absl::StrCat("{client-certificate-data: ", pki.Base64("other-client.crt"),
                            ", client-key-data: ", pki.Base64("other-client.key"), "}")));
  ASSERT_TRUE(stranger.ok()) << stranger.status();
  absl::Status stranger_refused = KubeClient(*stranger).Get("/api").status();
  EXPECT_TRUE(absl::IsUnavailable(stranger_refused)) << stranger_refused;
  EXPECT_THAT(stranger_refused.message(),
              HasSubstr("the server may have refused the client certificate (CN=paci-stranger)"))
      << stranger_refused;
}

TEST_F(KubeAuthTest, AServerSignedByAnotherCaIsRefusedWithTheReason) {
  TlsServer server;
  ASSERT_TRUE(server.valid());
  const Pki& pki = Pki::Get();
  absl::StatusOr<KubeClientOptions> options = Load(Kubeconfig(
      absl::StrCat("{server: '", server.url(), "', certificate-authority-data: ",
                   pki.Base64("other-ca.crt"), "}"),
      absl::StrCat("{client-certificate-data: ", pki.Base64("client.crt"),
                   ", client-key-data: ", pki.Base64("client.key"), "}")));
  ASSERT_TRUE(options.ok()) << options.status();
  // Only the kubeconfig's CA is trusted, not the system's roots (here: the
  // server's CA made a system root through OpenSSL's SSL_CERT_FILE).
  setenv("SSL_CERT_FILE", pki.Path("ca.crt").c_str(), 1);
  absl::Status status = KubeClient(*options).Get("/api").status();
  unsetenv("SSL_CERT_FILE");
  EXPECT_TRUE(absl::IsUnavailable(status)) << status;
  EXPECT_THAT(status.message(), HasSubstr("SSLServerVerification: self-signed certificate"))
      << status;
  EXPECT_THAT(status.message(), HasSubstr("certificate-authority")) << status;
}

TEST_F(KubeAuthTest, KubeconfigMistakesNameTheirKey) {
  const Pki& pki = Pki::Get();
  const std::string cluster = "{server: 'https://127.0.0.1:1'}";
  const std::string cert = absl::StrCat("client-certificate-data: ", pki.Base64("client.crt"));
  const std::string key = absl::StrCat("client-key-data: ", pki.Base64("client.key"));
  struct Case {
    std::string cluster;
    std::string user;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {cluster, absl::StrCat("{", cert, ", client-key-data: '***'}"),
       "users[0].user.client-key-data: not valid base64"},
      {cluster, absl::StrCat("{", cert, "}"),
       "users[0].user: client-certificate needs client-key or client-key-data"},
      {cluster, absl::StrCat("{", key, "}"), "users[0].user: client-key needs client-certificate"},
      {cluster, absl::StrCat("{client-certificate: missing.crt, ", key, "}"),
       absl::StrCat("users[0].user.client-certificate: cannot read ", dir_,
                    "/config/missing.crt: No such file or directory")},
      {cluster, absl::StrCat("{", cert, ", client-key-data: ", pki.Base64("other-client.key"), "}"),
       "users[0].user.client-key-data: the private key is not the one of "
       "users[0].user.client-certificate-data (CN=paci-test-user)"},
      {cluster, absl::StrCat("{", cert, ", client-key-data: ", pki.Base64("client.crt"), "}"),
       "users[0].user.client-key-data: no PEM private key"},
      {cluster,
       absl::StrCat("{client-certificate-data: ", absl::Base64Escape("hello"), ", ", key, "}"),
       "users[0].user.client-certificate-data: no PEM certificate"},
      {cluster, absl::StrCat("{", cert, ", client-certificate: c.crt, ", key, "}"),
       "users[0].user: client-certificate and client-certificate-data are both given"},
      {"{server: 'https://127.0.0.1:1', certificate-authority-data: aGVsbG8=}", "{}",
       "clusters[0].cluster.certificate-authority-data: no PEM certificate"},
      {"{server: 'https://127.0.0.1:1', certificate-authority: ca.crt}", "{}",
       "clusters[0].cluster.certificate-authority: cannot read"},
      {cluster, "{tokenFile: token}", "users[0].user.tokenFile: cannot read"},
      {cluster, "{exec: {command: x}}", "users[0].user.exec.apiVersion: required"},
      {cluster, "{exec: {apiVersion: client.authentication.k8s.io/v1alpha1, command: x}}",
       "users[0].user.exec.apiVersion: \"client.authentication.k8s.io/v1alpha1\" is not"},
      {cluster, "{exec: {apiVersion: client.authentication.k8s.io/v1, command: x}}",
       "users[0].user.exec.interactiveMode: required with client.authentication.k8s.io/v1"},
      {cluster,
       "{exec: {apiVersion: client.authentication.k8s.io/v1beta1, command: x, env: [{value: v}]}}",
       "users[0].user.exec.env[0].name: required"},
      {cluster, "{exec: {apiVersion: client.authentication.k8s.io/v1beta1}}",
       "users[0].user.exec.command: required"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<KubeClientOptions> options = Load(Kubeconfig(c.cluster, c.user));
    EXPECT_TRUE(absl::IsInvalidArgument(options.status())) << c.user << ": " << options.status();
    EXPECT_THAT(options.status().message(), HasSubstr(c.expected)) << c.user;
    EXPECT_THAT(options.status().message(), HasSubstr(dir_ + "/config/kubeconfig")) << c.user;
  }
  absl::Status provider = Load(Kubeconfig(cluster, "{auth-provider: {name: gcp}}")).status();
  EXPECT_TRUE(absl::IsUnimplemented(provider)) << provider;
  EXPECT_THAT(provider.message(), HasSubstr("users[0].user.auth-provider"));
}

// -- tokens ---------------------------------------------------------------

TEST_F(KubeAuthTest, TokenFileIsRelativeAndReadAgainOnceTheReloadPeriodHasPassed) {
  RecordingServer server;
  ASSERT_TRUE(server.ready());
  WriteText(dir_ + "/config/secrets/token", "first-token\n");
  absl::StatusOr<KubeClientOptions> options =
      Load(Kubeconfig(absl::StrCat("{server: '", server.url(), "'}"),
                      "{tokenFile: secrets/token}"));
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->token_file, dir_ + "/config/secrets/token");
  KubeClient cached(*options);
  options->credential_reload = absl::ZeroDuration();
  KubeClient rereading(*options);
  ASSERT_TRUE(cached.Get("/api").ok());
  ASSERT_TRUE(rereading.Get("/api").ok());
  WriteText(dir_ + "/config/secrets/token", "second-token\n");  // rotated
  ASSERT_TRUE(cached.Get("/api").ok());
  ASSERT_TRUE(rereading.Get("/api").ok());
  EXPECT_THAT(server.seen(), ::testing::ElementsAre("Bearer first-token", "Bearer first-token",
                                                    "Bearer first-token", "Bearer second-token"));
}

TEST_F(KubeAuthTest, ATokenWinsOverAnExecPluginAndAServerPathIsAPrefix) {
  RecordingServer server;
  ASSERT_TRUE(server.ready());
  absl::StatusOr<KubeClientOptions> options = Load(Kubeconfig(
      absl::StrCat("{server: '", server.url(), "/k8s/clusters/c-1/'}"),
      "{token: abc, exec: {apiVersion: client.authentication.k8s.io/v1beta1, "
      "command: never-run}}"));
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->exec_plugin, nullptr);  // as client-go: the token is used
  KubeClient client(*options);
  ASSERT_TRUE(client.Get("/api/v1/namespaces").ok());
  EXPECT_THAT(server.paths(), ::testing::ElementsAre("/k8s/clusters/c-1/api/v1/namespaces"));
  EXPECT_THAT(server.seen(), ::testing::ElementsAre("Bearer abc"));
}

// -- exec credential plugins ----------------------------------------------

// Counts its runs in $PLUGIN_STATE/runs, keeps its arguments and
// KUBERNETES_EXEC_INFO there, and prints the token <$PLUGIN_PREFIX>-<run>
// valid for $PLUGIN_LIFETIME seconds (no expiry when that is empty).
constexpr char kTokenPlugin[] = R"sh(#!/bin/sh
state="$PLUGIN_STATE"
n=$(( $(cat "$state/runs" 2>/dev/null || echo 0) + 1 ))
echo "$n" > "$state/runs"
printf '%s' "$KUBERNETES_EXEC_INFO" > "$state/exec-info"
printf '%s\n' "$@" > "$state/args"
expiry=""
if [ -n "$PLUGIN_LIFETIME" ]; then
  expiry=$(date -u -d "@$(( $(date +%s) + PLUGIN_LIFETIME ))" +%Y-%m-%dT%H:%M:%SZ)
  expiry=",\"expirationTimestamp\":\"$expiry\""
fi
printf '{"apiVersion":"%s","kind":"ExecCredential","status":{"token":"%s-%s"%s}}\n' \
  "${PLUGIN_API:-client.authentication.k8s.io/v1}" "$PLUGIN_PREFIX" "$n" "$expiry"
)sh";

class ExecPluginTest : public KubeAuthTest {
 protected:
  void SetUp() override {
    KubeAuthTest::SetUp();
    WriteText(dir_ + "/config/bin/token-plugin", kTokenPlugin, 0700);
    fs::create_directories(state());
  }
  std::string state() const { return dir_ + "/state"; }
  int runs() const { return std::atoi(ReadText(state() + "/runs").c_str()); }

  // A kubeconfig whose user runs `exec` (a YAML flow map) against `server`.
  std::string WithExec(const std::string& server, const std::string& exec,
                       const std::string& cluster_fields = "") {
    return Kubeconfig(absl::StrCat("{server: '", server, "'", cluster_fields, "}"),
                      absl::StrCat("{exec: ", exec, "}"));
  }
  std::string TokenPluginEnv(const std::string& lifetime,
                             const std::string& api = "client.authentication.k8s.io/v1") const {
    return absl::StrCat("[{name: PLUGIN_STATE, value: '", state(),
                        "'}, {name: PLUGIN_PREFIX, value: tok}, {name: PLUGIN_LIFETIME, value: '",
                        lifetime, "'}, {name: PLUGIN_API, value: ", api, "}]");
  }
};

TEST_F(ExecPluginTest, TokenIsSentAndKeptUntilItExpires) {
  RecordingServer server;
  ASSERT_TRUE(server.ready());
  const std::string extension =
      ", extensions: [{name: client.authentication.k8s.io/exec, "
      "extension: {audience: paci, retries: 3}}, {name: other, extension: {x: 1}}]";
  absl::StatusOr<KubeClientOptions> options = Load(WithExec(
      server.url(),
      absl::StrCat("{apiVersion: client.authentication.k8s.io/v1, command: ./bin/token-plugin, ",
                   "args: [--cluster, c1], interactiveMode: Never, provideClusterInfo: true, env: ",
                   TokenPluginEnv("3"), "}"),
      extension));
  ASSERT_TRUE(options.ok()) << options.status();
  ASSERT_NE(options->exec_plugin, nullptr);
  // A command with a '/' is relative to the kubeconfig's folder.
  EXPECT_EQ(options->exec_plugin->config().command, dir_ + "/config/bin/token-plugin");
  // The plugin's credential expires 3 s after it ran; this clock passes them at once.
  FakeClock clock(absl::Now());
  options->exec_plugin->set_clock(&clock);
  KubeClient client(*options);
  ASSERT_TRUE(client.Get("/api").ok());
  ASSERT_TRUE(client.Get("/api").ok());
  EXPECT_EQ(runs(), 1);  // kept: not expired yet
  clock.Advance(absl::Minutes(1));  // far past the expiry, however late the plugin ran
  absl::StatusOr<json> after = client.Get("/api");
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(runs(), 2);  // expired: run again
  EXPECT_THAT(server.seen(),
              ::testing::ElementsAre("Bearer tok-1", "Bearer tok-1", "Bearer tok-2"));

  EXPECT_EQ(ReadText(state() + "/args"), "--cluster\nc1\n");
  const json info = json::parse(ReadText(state() + "/exec-info"), nullptr, false);
  EXPECT_EQ(info["apiVersion"], "client.authentication.k8s.io/v1");
  EXPECT_EQ(info["kind"], "ExecCredential");
  EXPECT_EQ(info["spec"]["interactive"], false);
  EXPECT_EQ(info["spec"]["cluster"]["server"], server.url());
  EXPECT_EQ(info["spec"]["cluster"]["config"], (json{{"audience", "paci"}, {"retries", 3}}));
  EXPECT_FALSE(info.contains("status"));
}

TEST_F(ExecPluginTest, ARefusedTokenIsFetchedAgain) {
  RecordingServer server;
  ASSERT_TRUE(server.ready());
  server.Refuse("Bearer tok-1");
  absl::StatusOr<KubeClientOptions> options = Load(WithExec(
      server.url(),
      absl::StrCat("{apiVersion: client.authentication.k8s.io/v1beta1, command: ",
                   dir_, "/config/bin/token-plugin, env: ",
                   TokenPluginEnv("", "client.authentication.k8s.io/v1beta1"),
                   "}")));  // v1beta1: interactiveMode defaults to IfAvailable
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->exec_plugin->config().interactive_mode, "IfAvailable");
  KubeClient client(*options);
  absl::Status refused = client.Get("/api").status();
  EXPECT_TRUE(absl::IsUnauthenticated(refused)) << refused;
  ASSERT_TRUE(client.Get("/api").ok());  // no expiry, but the server said 401
  ASSERT_TRUE(client.Get("/api").ok());
  EXPECT_EQ(runs(), 2);
  EXPECT_THAT(server.seen(),
              ::testing::ElementsAre("Bearer tok-1", "Bearer tok-2", "Bearer tok-2"));
  const json info = json::parse(ReadText(state() + "/exec-info"), nullptr, false);
  EXPECT_EQ(info["apiVersion"], "client.authentication.k8s.io/v1beta1");
  EXPECT_FALSE(info["spec"].contains("cluster"));  // provideClusterInfo not set
}

TEST_F(ExecPluginTest, AFailingPluginFailsTheCallWithItsReason) {
  RecordingServer server;
  ASSERT_TRUE(server.ready());
  WriteText(dir_ + "/config/bin/failing",
            "#!/bin/sh\necho 'login expired: run paci-login' >&2\nexit 3\n", 0700);
  WriteText(dir_ + "/config/bin/chatty", "#!/bin/sh\necho 'hello'\n", 0700);
  WriteText(dir_ + "/config/bin/wrong-version",
            "#!/bin/sh\necho '{\"apiVersion\":\"client.authentication.k8s.io/v1beta1\","
            "\"kind\":\"ExecCredential\",\"status\":{\"token\":\"t\"}}'\n",
            0700);
  WriteText(dir_ + "/config/bin/no-status",
            "#!/bin/sh\necho '{\"apiVersion\":\"client.authentication.k8s.io/v1\","
            "\"kind\":\"ExecCredential\"}'\n",
            0700);
  struct Case {
    std::string command;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases = {
      {"./bin/failing",
       {"exec: executable " + dir_ + "/config/bin/failing failed with exit code 3",
        "login expired: run paci-login"}},
      {"paci-no-such-credential-plugin",
       {"exec: executable paci-no-such-credential-plugin not found",
        "client-go-credential-plugins", "Install it with: apt-get install paci-login"}},
      {"./bin/chatty", {"decoding stdout: not a JSON object: hello"}},
      {"./bin/wrong-version",
       {"exec plugin is configured to use API version client.authentication.k8s.io/v1, plugin "
        "returned version client.authentication.k8s.io/v1beta1"}},
      {"./bin/no-status", {"exec plugin didn't return a status field"}},
  };
  for (const Case& c : cases) {
    absl::StatusOr<KubeClientOptions> options = Load(WithExec(
        server.url(), absl::StrCat("{apiVersion: client.authentication.k8s.io/v1, command: ",
                                   c.command, ", interactiveMode: Never, installHint: "
                                   "'Install it with: apt-get install paci-login'}")));
    ASSERT_TRUE(options.ok()) << options.status();
    absl::Status status = KubeClient(*options).Get("/api").status();
    EXPECT_TRUE(absl::IsUnauthenticated(status)) << status;
    EXPECT_THAT(status.message(), HasSubstr("GET /api: getting credentials: ")) << status;
    for (const std::string& expected : c.expected) {
      EXPECT_THAT(status.message(), HasSubstr(expected)) << status;
    }
  }
  EXPECT_TRUE(server.seen().empty());  // no request went out without credentials
}

TEST_F(ExecPluginTest, AClientCertificateFromThePluginAuthenticates) {
  TlsServer server;
  ASSERT_TRUE(server.valid());
  const Pki& pki = Pki::Get();
  const json credential = {{"apiVersion", "client.authentication.k8s.io/v1beta1"},
                           {"kind", "ExecCredential"},
                           {"status",
                            {{"clientCertificateData", pki.Text("client.crt")},
                             {"clientKeyData", pki.Text("client.key")}}}};
  WriteText(dir_ + "/config/credential.json", credential.dump());
  WriteText(dir_ + "/config/bin/cert-plugin",
            absl::StrCat("#!/bin/sh\ncat '", dir_, "/config/credential.json'\n"), 0700);
  absl::StatusOr<KubeClientOptions> options = Load(Kubeconfig(
      absl::StrCat("{server: '", server.url(), "', certificate-authority-data: ",
                   pki.Base64("ca.crt"), "}"),
      "{exec: {apiVersion: client.authentication.k8s.io/v1beta1, command: bin/cert-plugin}}"));
  ASSERT_TRUE(options.ok()) << options.status();
  absl::StatusOr<json> answer = KubeClient(*options).Get("/api");
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ((*answer)["user"], "paci-test-user");
}

TEST(ExecCredentialParseTest, HalfACertificateOrABadTimestampIsRefused) {
  const auto parse = [](const std::string& status) {
    return ExecCredentialPlugin::ParseCredential(
        absl::StrCat(R"({"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential",)",
                     R"("status":)", status, "}"),
        "client.authentication.k8s.io/v1");
  };
  EXPECT_THAT(parse(R"({"clientCertificateData":"x"})").status().message(),
              HasSubstr("exec plugin returned only certificate or key, not both"));
  EXPECT_THAT(parse(R"({})").status().message(),
              HasSubstr("exec plugin didn't return a token or cert/key pair"));
  EXPECT_THAT(parse(R"({"token":"t","expirationTimestamp":"tomorrow"})").status().message(),
              HasSubstr("status.expirationTimestamp: \"tomorrow\" is not RFC 3339"));
  EXPECT_THAT(parse(R"({"clientCertificateData":"x","clientKeyData":"y"})").status().message(),
              HasSubstr("failed parsing client key/certificate: status.clientCertificateData"));
  absl::StatusOr<ExecCredential> ok =
      parse(R"({"token":"t","expirationTimestamp":"2030-01-02T03:04:05Z"})");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->token, "t");
  EXPECT_EQ(ok->expiry, absl::FromUnixSeconds(1893553445));
}

}  // namespace
}  // namespace paci::kube
