#include "common/grpc_security.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/net_address.h"

namespace paci {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(IsLoopbackHostTest, OnlyThisMachinesLoopbackIsLoopback) {
  for (const char* host : {"127.0.0.1", "127.1.2.3", "localhost", "[::1]"}) {
    EXPECT_TRUE(IsLoopbackHost(host)) << host;
  }
  for (const char* host : {"0.0.0.0", "[::]", "10.0.0.1", "127.0.0.1.example.org", "127.example",
                           "1127.0.0.1", "::1", "", "coordinator.paci.svc"}) {
    EXPECT_FALSE(IsLoopbackHost(host)) << host;
  }
}

constexpr char kWhat[] = "submit jobs";

TEST(CheckExposureTest, LoopbackServesAnythingElsewhereNeedsTlsAndClientAuthentication) {
  const TlsFiles plaintext;
  const TlsFiles server_tls{"c.crt", "c.key", ""};
  const TlsFiles mutual{"c.crt", "c.key", "ca.crt"};
  EXPECT_TRUE(CheckExposure("127.0.0.1", plaintext, false, kWhat).ok());
  EXPECT_TRUE(CheckExposure("0.0.0.0", mutual, false, kWhat).ok());
  EXPECT_TRUE(CheckExposure("0.0.0.0", server_tls, /*has_token=*/true, kWhat).ok());

  const absl::Status plain = CheckExposure("0.0.0.0", plaintext, true, kWhat);
  EXPECT_EQ(plain.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(plain.message(), AllOf(HasSubstr("refusing to serve on 0.0.0.0 in plaintext"),
                                     HasSubstr("--tls_cert"), HasSubstr("could submit jobs"),
                                     HasSubstr("--insecure")));
  const absl::Status anonymous = CheckExposure("10.0.0.7", server_tls, false, kWhat);
  EXPECT_EQ(anonymous.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(anonymous.message(), HasSubstr("without client authentication (--tls_ca"));
  // (--insecure, which serves anyway: CoordinatorTest.test_a_coordinator_others_can_reach_...)
}

}  // namespace
}  // namespace paci
