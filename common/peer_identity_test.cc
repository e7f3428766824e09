#include "common/peer_identity.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace paci {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(PeerIdentityTest, TheCommonNameSaysOperatorWorkerOfANamespaceOrNobody) {
  EXPECT_EQ(IdentityOfCommonName("system:paci:operator").kind, PeerIdentity::Kind::kOperator);
  const PeerIdentity worker = IdentityOfCommonName("system:paci:worker:team-a");
  EXPECT_EQ(worker.kind, PeerIdentity::Kind::kWorker);
  EXPECT_EQ(worker.name_space, "team-a");
  for (const char* other : {"", "paci-worker", "system:paci:worker:", "system:paci:operators",
                            "xsystem:paci:worker:team-a"}) {
    EXPECT_EQ(IdentityOfCommonName(other).kind, PeerIdentity::Kind::kUnnamed) << other;
  }
}

TEST(PeerIdentityTest, ABoundWorkerRegistersOnlyInsideItsNamespace) {
  const PeerIdentity worker = IdentityOfCommonName("system:paci:worker:team-a");
  const std::string own = "team-a.kjv", other = "team-b.kjv";
  EXPECT_TRUE(CheckWorkerIdentity(worker, "team-a.kjv-worker-0", &own).ok());

  const absl::Status id = CheckWorkerIdentity(worker, "team-b.kjv-worker-0", &own);
  EXPECT_EQ(id.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(id.message(), AllOf(HasSubstr("register.worker_id: \"team-b.kjv-worker-0\" is not in "
                                            "namespace team-a"),
                                  HasSubstr("binds this worker to namespace team-a")));
  const absl::Status label = CheckWorkerIdentity(worker, "team-a.kjv-worker-0", &other);
  EXPECT_EQ(label.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(label.message(), HasSubstr("register.labels[paci.dev/job]: \"team-b.kjv\""));
  // "team-a" must be the whole namespace: "team-ab.x" is another's.
  const std::string longer = "team-ab.kjv";
  EXPECT_FALSE(CheckWorkerIdentity(worker, "team-a.w", &longer).ok());
  EXPECT_THAT(CheckWorkerIdentity(worker, "team-a.w", nullptr).message(),
              HasSubstr("register.labels[paci.dev/job]: missing"));

  // The unnamed (no certificate, or one of another name) are not bound; the operator's
  // certificate registers no worker.
  EXPECT_TRUE(CheckWorkerIdentity(IdentityOfCommonName("paci-worker"), "w0", nullptr).ok());
  EXPECT_EQ(CheckWorkerIdentity(IdentityOfCommonName("system:paci:operator"), "w0", nullptr).code(),
            absl::StatusCode::kPermissionDenied);
}

TEST(PeerIdentityTest, AWorkersCertificateIsNoClients) {
  EXPECT_TRUE(CheckClientIdentity(IdentityOfCommonName("system:paci:operator")).ok());
  EXPECT_TRUE(CheckClientIdentity(IdentityOfCommonName("ada")).ok());
  const absl::Status worker = CheckClientIdentity(IdentityOfCommonName("system:paci:worker:team-a"));
  EXPECT_EQ(worker.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(worker.message(), HasSubstr("is a worker's: it may connect as a worker of namespace "
                                          "team-a, not submit, list or cancel jobs"));
}

}  // namespace
TEST(PeerIdentityTest, ATenantSeesAndLabelsOnlyTheJobsOfItsNamespace) {
  const PeerIdentity tenant = IdentityOfCommonName("system:paci:tenant:team-a");
  EXPECT_EQ(tenant.kind, PeerIdentity::Kind::kTenant);
  EXPECT_EQ(tenant.name_space, "team-a");
  EXPECT_EQ(IdentityOfCommonName("system:paci:tenant:").kind, PeerIdentity::Kind::kUnnamed);

  EXPECT_TRUE(MaySeeJob(tenant, {{"paci.dev/namespace", "team-a"}, {"x", "y"}}));
  EXPECT_FALSE(MaySeeJob(tenant, {{"paci.dev/namespace", "team-b"}}));
  EXPECT_FALSE(MaySeeJob(tenant, {{"paci.dev/namespace", "team-ab"}}));
  EXPECT_FALSE(MaySeeJob(tenant, {}));  // a job of no namespace is the administrator's
  for (const char* other : {"system:paci:operator", "", "admin"}) {
    EXPECT_TRUE(MaySeeJob(IdentityOfCommonName(other), {})) << other;
  }

  std::map<std::string, std::string> labels = {{"team", "x"}};
  ASSERT_TRUE(LabelSubmission(tenant, &labels).ok());
  EXPECT_EQ(labels.at("paci.dev/namespace"), "team-a");
  EXPECT_EQ(labels.at("team"), "x");
  std::map<std::string, std::string> claimed = {{"paci.dev/namespace", "team-b"}};
  const absl::Status refused = LabelSubmission(tenant, &claimed);
  EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(refused.message(),
              AllOf(HasSubstr("labels[paci.dev/namespace]: \"team-b\" is not your namespace"),
                    HasSubstr("system:paci:tenant:team-a")));
  // The operator labels its jobs itself; the unnamed are not bound.
  std::map<std::string, std::string> operators = {{"paci.dev/namespace", "team-b"}};
  EXPECT_TRUE(LabelSubmission(IdentityOfCommonName("system:paci:operator"), &operators).ok());
  EXPECT_EQ(operators.at("paci.dev/namespace"), "team-b");

  // A tenant is a client: it may call the Coordinator service, and registers no worker.
  EXPECT_TRUE(CheckClientIdentity(tenant).ok());
  const std::string label = "team-a.kjv";
  const absl::Status worker = CheckWorkerIdentity(tenant, "team-a.w0", &label);
  EXPECT_EQ(worker.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(worker.message(), HasSubstr("a tenant's of namespace team-a: it registers no worker"));
}

}  // namespace paci
