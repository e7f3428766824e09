#include "common/job_token.h"

#include <gtest/gtest.h>

namespace paci {
namespace {

TEST(JobTokenTest, TokenDigestIsSha256InHex) {
  // FIPS 180-2's example.
  EXPECT_EQ(TokenDigest("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(TokenDigest(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(JobTokenTest, JobTokenIsHmacSha256OfTheUidUnderTheKey) {
  // RFC 4231, test case 2.
  EXPECT_EQ(JobToken("Jefe", "what do ya want for nothing?"),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  // Another job, or another key, has another token.
  EXPECT_NE(JobToken("key", "uid-a"), JobToken("key", "uid-b"));
  EXPECT_NE(JobToken("key", "uid-a"), JobToken("other", "uid-a"));
  EXPECT_EQ(JobToken("key", "uid-a").size(), 64u);
}

}  // namespace
}  // namespace paci
