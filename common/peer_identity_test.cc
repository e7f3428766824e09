#include "common/peer_identity.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "common/operator_job_name.h"

namespace paci {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(PeerIdentityTest, TheCommonNameSaysOperatorWorkerOfANamespaceOrNobody) {
  EXPECT_EQ(IdentityOfCommonName("system:paci:operator").kind, PeerIdentity::Kind::kOperator);
  const PeerIdentity worker = IdentityOfCommonName("system:paci:worker:team-a");
  EXPECT_EQ(worker.kind, PeerIdentity::Kind::kWorker);
  EXPECT_EQ(worker.name_space, "team-a");
  // A certificate of any other name is no one's paci knows, unless --admin_identities lists it.
  for (const char* other : {"", "paci-worker", "system:paci:worker:", "system:paci:operators",
                            "xsystem:paci:worker:team-a"}) {
    EXPECT_EQ(IdentityOfCommonName(other).kind, PeerIdentity::Kind::kUnknown) << other;
  }
  // Without a certificate (no mutual TLS) a caller is unnamed.
  EXPECT_EQ(PeerIdentity{}.kind, PeerIdentity::Kind::kUnnamed);
}

// --admin_identities names the administrators; every other common name outside paci's
// own is refused, and so is a name under system:paci: that is none of paci's (a worker
// or tenant without a namespace, or with one no namespace could have).
TEST(PeerIdentityTest, OnlyListedCommonNamesAreAdministratorsAndMalformedPaciNamesAreRefused) {
  const absl::StatusOr<AdministratorNames> admins = ParseAdministratorNames(" ada, ,grace ,");
  ASSERT_TRUE(admins.ok()) << admins.status();
  EXPECT_EQ(*admins, (AdministratorNames{"ada", "grace"}));
  EXPECT_TRUE(ParseAdministratorNames("")->empty());

  const PeerIdentity ada = IdentityOfCommonName("ada", *admins);
  EXPECT_EQ(ada.kind, PeerIdentity::Kind::kAdministrator);
  EXPECT_TRUE(CheckClientIdentity(ada).ok());
  EXPECT_TRUE(MaySeeJob(ada, {{"paci.dev/namespace", "team-b"}}));
  EXPECT_TRUE(MaySeeJob(ada, {}));
  EXPECT_TRUE(CheckWorkerIdentity(ada, "w0", nullptr).ok());
  EXPECT_TRUE(CheckPriority(ada, 1000, 0).ok());

  const PeerIdentity mallory = IdentityOfCommonName("mallory", *admins);
  EXPECT_EQ(mallory.kind, PeerIdentity::Kind::kUnknown);
  const absl::Status client = CheckClientIdentity(mallory);
  EXPECT_EQ(client.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(client.message(), AllOf(HasSubstr("the certificate \"mallory\" is not an administrator's"),
                                      HasSubstr("--admin_identities")));
  EXPECT_FALSE(MaySeeJob(mallory, {}));
  std::map<std::string, std::string> labels;
  EXPECT_EQ(LabelSubmission(mallory, &labels).code(), absl::StatusCode::kPermissionDenied);
  const absl::Status worker = CheckWorkerIdentity(mallory, "w0", nullptr);
  EXPECT_EQ(worker.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(worker.message(), HasSubstr("--admin_identities"));

  for (const char* malformed : {"system:paci:worker:", "system:paci:tenant:", "system:paci:worker:Team-A",
                                "system:paci:worker:team.a", "system:paci:tenant:-x", "system:paci:admin"}) {
    const PeerIdentity peer = IdentityOfCommonName(malformed, *admins);
    EXPECT_EQ(peer.kind, PeerIdentity::Kind::kUnknown) << malformed;
    const absl::Status refused = CheckClientIdentity(peer);
    EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied) << malformed;
    EXPECT_THAT(refused.message(),
                AllOf(HasSubstr(absl::StrCat("the certificate \"", malformed, "\" names no identity of paci")),
                      HasSubstr("system:paci:worker:<namespace>")));
    EXPECT_EQ(CheckWorkerIdentity(peer, "w0", nullptr).code(), absl::StatusCode::kPermissionDenied);
  }
  // A certificate without a common name is no administrator's either.
  EXPECT_THAT(CheckClientIdentity(IdentityOfCommonName("", *admins)).message(),
              HasSubstr("a certificate without a common name is not an administrator's"));
  // paci's own names cannot be made administrators.
  const absl::StatusOr<AdministratorNames> reserved =
      ParseAdministratorNames("ada,system:paci:worker:team-a");
  EXPECT_EQ(reserved.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(reserved.status().message(),
              HasSubstr("--admin_identities: \"system:paci:worker:team-a\" is under system:paci:"));
  EXPECT_EQ(IdentityOfCommonName("system:paci:operator", {"system:paci:operator"}).kind,
            PeerIdentity::Kind::kOperator);
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

  // The unnamed (no certificate) and administrators are not bound; the operator's
  // certificate registers no worker.
  EXPECT_TRUE(CheckWorkerIdentity(PeerIdentity{}, "w0", nullptr).ok());
  EXPECT_TRUE(CheckWorkerIdentity(IdentityOfCommonName("paci-worker", {"paci-worker"}), "w0", nullptr).ok());
  EXPECT_EQ(CheckWorkerIdentity(IdentityOfCommonName("system:paci:operator"), "w0", nullptr).code(),
            absl::StatusCode::kPermissionDenied);
}

TEST(PeerIdentityTest, AWorkersCertificateIsNoClients) {
  EXPECT_TRUE(CheckClientIdentity(IdentityOfCommonName("system:paci:operator")).ok());
  EXPECT_TRUE(CheckClientIdentity(IdentityOfCommonName("ada", {"ada"})).ok());
  EXPECT_TRUE(CheckClientIdentity(PeerIdentity{}).ok());
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
  EXPECT_EQ(IdentityOfCommonName("system:paci:tenant:").kind, PeerIdentity::Kind::kUnknown);

  EXPECT_TRUE(MaySeeJob(tenant, {{"paci.dev/namespace", "team-a"}, {"x", "y"}}));
  EXPECT_FALSE(MaySeeJob(tenant, {{"paci.dev/namespace", "team-b"}}));
  EXPECT_FALSE(MaySeeJob(tenant, {{"paci.dev/namespace", "team-ab"}}));
  EXPECT_FALSE(MaySeeJob(tenant, {}));  // a job of no namespace is the administrator's
  for (const char* other : {"system:paci:operator", "admin"}) {
    EXPECT_TRUE(MaySeeJob(IdentityOfCommonName(other, {"admin"}), {})) << other;
  }
  EXPECT_TRUE(MaySeeJob(PeerIdentity{}, {}));

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

// A tenant's job runs on its own namespace's workers only: its selector may not name
// another namespace's job or namespace (the coordinator places it so whatever the
// selector says; these are refused at submit, before anything is stored).
TEST(PeerIdentityTest, ATenantsSelectorNamesNoOtherNamespace) {
  const PeerIdentity tenant = IdentityOfCommonName("system:paci:tenant:team-a");
  EXPECT_TRUE(CheckWorkerSelector(tenant, {}, "team-a").ok());
  EXPECT_TRUE(CheckWorkerSelector(tenant, {{"paci.dev/job", "team-a.x"}, {"gpu", "a100"}}, "team-a").ok());
  EXPECT_TRUE(CheckWorkerSelector(tenant, {{"paci.dev/namespace", "team-a"}}, "team-a").ok());

  const absl::Status other = CheckWorkerSelector(tenant, {{"paci.dev/job", "team-b.x"}}, "team-a");
  EXPECT_EQ(other.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(other.message(),
            "run_policy.worker_selector: paci.dev/job=team-b.x names namespace team-b; a job of "
            "namespace team-a runs on its own namespace's workers only");
  // "team-a" must be the whole namespace: "team-ab.x" is another's.
  EXPECT_THAT(CheckWorkerSelector(tenant, {{"paci.dev/job", "team-ab.x"}}, "team-a").message(),
              HasSubstr("names namespace team-ab"));
  EXPECT_THAT(CheckWorkerSelector(tenant, {{"paci.dev/job", "x"}}, "team-a").message(),
              HasSubstr("paci.dev/job=x names no namespace (a job \"team-a.<name>\")"));
  const absl::Status ns = CheckWorkerSelector(tenant, {{"paci.dev/namespace", "team-b"}}, "team-a");
  EXPECT_EQ(ns.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(ns.message(), HasSubstr("run_policy.worker_selector: paci.dev/namespace=team-b names "
                                      "namespace team-b; a job of namespace team-a"));

  // The operator selects its TrainingJob's workers; an administrator any. Neither may ask
  // for another namespace than the job's own, which placement would not follow.
  for (const PeerIdentity& peer :
       {IdentityOfCommonName("system:paci:operator"), PeerIdentity{}}) {
    EXPECT_TRUE(CheckWorkerSelector(peer, {{"paci.dev/job", "team-b.x"}}, "team-b").ok());
    EXPECT_TRUE(CheckWorkerSelector(peer, {{"paci.dev/job", "team-b.x"}}, "").ok());
    const absl::Status mismatch = CheckWorkerSelector(peer, {{"paci.dev/namespace", "team-b"}}, "");
    EXPECT_EQ(mismatch.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(mismatch.message(), HasSubstr("the job is of none (labels[paci.dev/namespace])"));
  }
}

TEST(PeerIdentityTest, ATenantsPriorityIsBoundedByTheFlag) {
  const PeerIdentity tenant = IdentityOfCommonName("system:paci:tenant:team-a");
  EXPECT_TRUE(CheckPriority(tenant, 0, 0).ok());
  EXPECT_TRUE(CheckPriority(tenant, -5, 0).ok());
  EXPECT_TRUE(CheckPriority(tenant, 10, 10).ok());
  const absl::Status high = CheckPriority(tenant, 1000, 0);
  EXPECT_EQ(high.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(high.message(),
              AllOf(HasSubstr("run_policy.priority: 1000 is above 0, the highest a tenant's job may have"),
                    HasSubstr("--tenant_max_priority"), HasSubstr("system:paci:tenant:team-a")));
  EXPECT_FALSE(CheckPriority(tenant, 11, 10).ok());
  // The operator (for every namespace's TrainingJobs) and the unnamed may set more.
  EXPECT_TRUE(CheckPriority(IdentityOfCommonName("system:paci:operator"), 1000, 0).ok());
  EXPECT_TRUE(CheckPriority(PeerIdentity{}, 1000, 0).ok());
}

// The namespace whose jobs a worker is placed on: its certificate's; none for an
// administrator's; without a certificate (no mutual TLS), the one its job label names.
TEST(PeerIdentityTest, AWorkersNamespaceIsItsCertificatesWhenItHasOne) {
  const std::string team_b = "team-b.kjv", bare = "kjv";
  EXPECT_EQ(WorkerNamespace(IdentityOfCommonName("system:paci:worker:team-a"), nullptr), "team-a");
  EXPECT_EQ(WorkerNamespace(IdentityOfCommonName("ada", {"ada"}), &team_b), "");
  EXPECT_EQ(WorkerNamespace(PeerIdentity{}, &team_b), "team-b");
  EXPECT_EQ(WorkerNamespace(PeerIdentity{}, &bare), "");
  EXPECT_EQ(WorkerNamespace(PeerIdentity{}, nullptr), "");
}


// The names the operator gives TrainingJobs' jobs (common/operator_job_name.h):
// made and recognized by the same constants, cut to 63 or not, evicted or not;
// other names, a tenant's own among them, are not taken for them.
TEST(OperatorJobNameTest, TheOperatorsNamesAreRecognizedAndNoOthers) {
  const std::string uid = "0123abcd-ef01-4567-89ab-cdef01234567";
  EXPECT_EQ(OperatorJobName("kjv", uid, 1, 0), "kjv-0123abcd-g1");
  EXPECT_EQ(OperatorJobName("kjv", uid, 3, 2), "kjv-0123abcd-g3-e2");
  EXPECT_EQ(OperatorJobName("kjv", uid, 3, 0, 4), "kjv-0123abcd-g3-p4");
  EXPECT_EQ(OperatorJobName("kjv", uid, 3, 2, 6), "kjv-0123abcd-g3-e2-p6");
  EXPECT_EQ(OperatorJobName(std::string(70, 'x'), uid, 1, 0, 12).size(), kMaxJobNameLength);
  const std::string cut = OperatorJobName(std::string(70, 'x'), uid, 1, 0);
  EXPECT_EQ(cut.size(), kMaxJobNameLength);
  // A cut that ends in '-' loses it.
  EXPECT_EQ(OperatorJobName(std::string(50, 'a') + "-" + std::string(20, 'b'), uid, 1, 0),
            std::string(50, 'a') + "-0123abcd-g1");
  for (const std::string& name :
       {OperatorJobName("kjv", uid, 1, 0), OperatorJobName("kjv", uid, 12345, 17), cut,
        OperatorJobName("kjv", uid, 1, 0, 3), OperatorJobName("kjv", uid, 2, 1, 6),
        std::string("a-b-c-deadbeef-g7"), std::string("x-00000000-g1-e1")}) {
    EXPECT_TRUE(IsOperatorJobName(name)) << name;
  }
  for (const char* name :
       {"kjv", "kjv-0123abcd", "kjv-0123abcd-g", "kjv-0123abcd-g1-e", "kjv-0123abcd-e1",
        "kjv-0123abc-g1", "kjv_0123abcd-g1", "-0123abcd-g1", "0123abcd-g1", "kjv-0123ABCD-g1",
        "kjv-0123abcd-g1x", "kjv-0123abcd-g1-e2-g3", "experiment-baseline-g2", "run-2024-g1",
        "kjv-0123abcd-p1", "kjv-0123abcd-g1-p", "kjv-0123abcd-g1-p2-e1", "run-p3"}) {
    EXPECT_FALSE(IsOperatorJobName(name)) << name;
  }
}

// A tenant may not submit a job under a name of the operator's form: it could
// take the name of a TrainingJob's next job (which the operator submits under
// a name it can predict) first. The operator, administrators and the unnamed
// (no mutual TLS) may.
TEST(PeerIdentityTest, OnlyTheOperatorAdministratorsAndTheUnnamedSubmitNamesOfTheOperatorsForm) {
  const PeerIdentity tenant = IdentityOfCommonName("system:paci:tenant:team-a");
  const absl::Status refused = CheckJobNameOwner(tenant, "kjv-0123abcd-g2");
  EXPECT_EQ(refused.code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(refused.message(),
            "name: \"kjv-0123abcd-g2\" has the form of the names the operator gives TrainingJobs' "
            "jobs (<name>-<uid8>-g<generation>[-e<evictions>][-p<run>]); choose another");
  EXPECT_EQ(CheckJobNameOwner(tenant, "kjv-0123abcd-g2-e1").code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(CheckJobNameOwner(tenant, "kjv").ok());
  EXPECT_TRUE(CheckJobNameOwner(tenant, "kjv-2").ok());
  for (const PeerIdentity& allowed : {IdentityOfCommonName("system:paci:operator"),
                                      IdentityOfCommonName("ada", {"ada"}), PeerIdentity{}}) {
    EXPECT_TRUE(CheckJobNameOwner(allowed, "kjv-0123abcd-g2").ok()) << allowed.common_name;
    EXPECT_TRUE(CheckJobNameOwner(allowed, "kjv-0123abcd-g2-e1").ok()) << allowed.common_name;
  }
  EXPECT_EQ(CheckJobNameOwner(IdentityOfCommonName("system:paci:worker:team-a"), "kjv-0123abcd-g2")
                .code(),
            absl::StatusCode::kPermissionDenied);
}

}  // namespace paci
