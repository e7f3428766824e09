// The Kubernetes client and informer against a real kube-apiserver on
// 127.0.0.1, behind the fault proxy (kube/test_api_server.h). Leader
// election is tested in operator/controller/leader_elector_test.cc.

#include "kube/kube_client.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gtest/gtest.h>
#include <httplib.h>

#include "absl/strings/str_cat.h"
#include "kube/informer.h"
#include "kube/test_api_server.h"

namespace paci::kube {
namespace {

using nlohmann::json;

class KubeClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(server_.ok()) << "the API server did not start; see " << server_.log_path();
    client_ = std::make_unique<KubeClient>(server_.client_options());
  }

  static json Pod(const std::string& name) {
    return {{"apiVersion", "v1"},
            {"kind", "Pod"},
            {"metadata", {{"name", name}, {"namespace", "default"}, {"labels", {{"app", "t"}}}}},
            {"spec", {{"containers", json::array({{{"name", "c"}, {"image", "busybox"}}})}}}};
  }
  std::string PodPath(const std::string& name) {
    return CollectionPath("", "v1", "default", "pods") + "/" + name;
  }
  static bool WaitFor(const std::function<bool()>& condition) {
    for (int i = 0; i < 400; ++i) {
      if (condition()) return true;
      absl::SleepFor(absl::Milliseconds(50));
    }
    return condition();
  }

  TestApiServer server_;
  std::unique_ptr<KubeClient> client_;
};

TEST_F(KubeClientTest, CrudMapsHttpErrorsToCanonicalCodes) {
  const std::string pods = CollectionPath("", "v1", "default", "pods");
  absl::StatusOr<json> created = client_->Create(pods, Pod("a"));
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_FALSE((*created)["metadata"]["resourceVersion"].get<std::string>().empty());
  EXPECT_TRUE(absl::IsAlreadyExists(client_->Create(pods, Pod("a")).status()));
  EXPECT_TRUE(absl::IsNotFound(client_->Get(PodPath("missing")).status()));

  json stale = *created;
  json changed = *created;
  changed["metadata"]["labels"]["app"] = "u";
  ASSERT_TRUE(client_->Update(PodPath("a"), changed).ok());
  absl::Status conflict = client_->Update(PodPath("a"), stale).status();
  EXPECT_TRUE(absl::IsAborted(conflict)) << conflict;
  EXPECT_NE(conflict.message().find("modified"), std::string::npos) << conflict;

  absl::StatusOr<json> list = client_->List(pods, ListOptions{"app=u", ""});
  ASSERT_TRUE(list.ok()) << list.status();
  EXPECT_EQ((*list)["items"].size(), 1u);
  EXPECT_TRUE(client_->Delete(PodPath("a")).ok());
  EXPECT_TRUE(absl::IsNotFound(client_->Delete(PodPath("a"))));
}

TEST_F(KubeClientTest, StatusConflictIsRetriedWithAFreshRead) {
  absl::StatusOr<json> created =
      client_->Create(CollectionPath("", "v1", "default", "pods"), Pod("a"));
  ASSERT_TRUE(created.ok()) << created.status();
  // Someone else changes the object: our copy is now stale.
  json other = *created;
  other["metadata"]["labels"]["owner"] = "someone-else";
  ASSERT_TRUE(client_->Update(PodPath("a"), other).ok());

  int calls = 0;
  absl::StatusOr<json> written = client_->UpdateStatus(PodPath("a"), *created, [&](json& pod) {
    ++calls;
    pod["status"] = {{"phase", "Running"}};
  });
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(calls, 2);  // the stale write was refused (409), then read again
  absl::StatusOr<json> now = client_->Get(PodPath("a"));
  ASSERT_TRUE(now.ok());
  EXPECT_EQ((*now)["status"]["phase"], "Running");
  EXPECT_EQ((*now)["metadata"]["labels"]["owner"], "someone-else");
}

TEST_F(KubeClientTest, WatchFromATooOldVersionIsOutOfRange) {
  const std::string pods = CollectionPath("", "v1", "default", "pods");
  absl::StatusOr<json> created = client_->Create(pods, Pod("a"));
  ASSERT_TRUE(created.ok());
  ASSERT_TRUE(client_->Create(pods, Pod("b")).ok());
  ASSERT_TRUE(server_.Control("compact"));
  WatchOptions options;
  options.resource_version = (*created)["metadata"]["resourceVersion"];
  absl::Status status = client_->Watch(pods, options, [](const WatchEvent&) { return true; });
  EXPECT_TRUE(absl::IsOutOfRange(status)) << status;
}

TEST_F(KubeClientTest, InformerResumesAfterADroppedWatchWithoutListingAgain) {
  const std::string pods = CollectionPath("", "v1", "default", "pods");
  ASSERT_TRUE(client_->Create(pods, Pod("a")).ok());
  std::atomic<int> events{0};
  Informer informer(*client_, Informer::Options{pods, "app", "pods"},
                    [&](const std::string&, const json&) { ++events; });
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(absl::Seconds(10)));
  // The watch is open at the server, so cutting it below does cut it.
  ASSERT_TRUE(WaitFor([&] { return server_.OpenWatches() >= 1; }));

  ASSERT_TRUE(server_.Control("drop-watches"));
  ASSERT_TRUE(client_->Create(pods, Pod("b")).ok());
  ASSERT_TRUE(WaitFor([&] { return informer.Get("default", "b").has_value(); }));
  EXPECT_TRUE(informer.Get("default", "a").has_value());
  const Informer::Stats stats = informer.stats();
  EXPECT_EQ(stats.lists, 1);  // resumed from its resourceVersion
  EXPECT_GE(stats.watches, 2);
  informer.Stop();
}

TEST_F(KubeClientTest, InformerListsAgainAfter410AndMissesNothing) {
  const std::string pods = CollectionPath("", "v1", "default", "pods");
  ASSERT_TRUE(client_->Create(pods, Pod("a")).ok());
  std::vector<std::string> deleted;
  absl::Mutex mutex;
  Informer::Options options{pods, "", "pods"};
  options.initial_backoff = absl::Seconds(5);  // the window in which the world moves on
  Informer informer(*client_, options, [&](const std::string& type, const json& object) {
    absl::MutexLock lock(&mutex);
    if (type == "DELETED") deleted.push_back(object["metadata"]["name"]);
  });
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(absl::Seconds(10)));
  // The watch is open at the server, so cutting it below does cut it.
  ASSERT_TRUE(WaitFor([&] { return server_.OpenWatches() >= 1; }));

  // Cut the stream; while the informer backs off, the world changes and the
  // server forgets that history: its resourceVersion is now too old.
  ASSERT_TRUE(server_.Control("drop-watches"));
  ASSERT_TRUE(client_->Delete(PodPath("a")).ok());
  ASSERT_TRUE(client_->Create(pods, Pod("c")).ok());
  ASSERT_TRUE(server_.Control("compact"));
  ASSERT_TRUE(WaitFor([&] { return informer.stats().expired >= 1; }));
  ASSERT_TRUE(WaitFor([&] { return informer.stats().lists >= 2; }));
  EXPECT_TRUE(informer.Get("default", "c").has_value());
  EXPECT_FALSE(informer.Get("default", "a").has_value());
  absl::MutexLock lock(&mutex);
  EXPECT_EQ(deleted, std::vector<std::string>{"a"});
  informer.Stop();
}

TEST_F(KubeClientTest, KubeconfigGivesServerTokenAndNamespace) {
  char path[] = "/tmp/paci-kubeconfig-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << "apiVersion: v1\nkind: Config\ncurrent-context: t\n"
                         "contexts:\n- name: t\n  context: {cluster: c, user: u, namespace: ns1}\n"
                         "clusters:\n- name: c\n  cluster: {server: '"
                      << server_.url() << "'}\nusers:\n- name: u\n  user: {token: abc}\n";
  absl::StatusOr<KubeClientOptions> options = LoadKubeconfig(path);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->server, server_.url());
  EXPECT_EQ(options->bearer_token, "abc");
  EXPECT_EQ(options->default_namespace, "ns1");
  std::ofstream(path) << "apiVersion: v1\nkind: Config\ncurrent-context: missing\n";
  absl::StatusOr<KubeClientOptions> bad = LoadKubeconfig(path);
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  EXPECT_NE(bad.status().message().find("missing"), std::string::npos) << bad.status();
  std::remove(path);
}

TEST(InClusterConfigTest, ReadsTheServiceAccountAndNamesWhatIsMissing) {
  char dir_template[] = "/tmp/paci-sa-XXXXXX";
  const std::string dir = mkdtemp(dir_template);
  EXPECT_TRUE(absl::IsFailedPrecondition(InClusterConfig("", "", dir).status()));
  absl::Status no_token = InClusterConfig("10.0.0.1", "443", dir).status();
  EXPECT_TRUE(absl::IsFailedPrecondition(no_token));
  EXPECT_NE(no_token.message().find(dir + "/token"), std::string::npos) << no_token;
  std::ofstream(dir + "/token") << "sa-token\n";
  std::ofstream(dir + "/namespace") << "team-b";
  absl::StatusOr<KubeClientOptions> options = InClusterConfig("10.0.0.1", "443", dir);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->server, "https://10.0.0.1:443");
  EXPECT_EQ(options->bearer_token, "sa-token");
  EXPECT_EQ(options->token_file, dir + "/token");  // read again: kubelet rotates it
  EXPECT_EQ(options->ca_file, dir + "/ca.crt");
  EXPECT_EQ(options->default_namespace, "team-b");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace paci::kube
