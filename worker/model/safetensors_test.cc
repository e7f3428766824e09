#include "worker/model/safetensors.h"

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace paci {
namespace {

using ::testing::HasSubstr;

// A file of `header` (the JSON) and `data` bytes, as the format lays it out.
std::string FileOf(const std::string& header, const std::string& data) {
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xff));
  return out + header + data;
}

TEST(SafetensorsTest, WhatIsWrittenParsesBackWithItsBytesShapesAndMetadata) {
  const float a[6] = {1, 2, 3, 4, 5, 6};
  const uint16_t b[2] = {0x3f80, 0x4000};  // bf16 1.0 and 2.0
  const std::map<std::string, SafeTensor> tensors = {
      {"a", {"F32", {2, 3}, std::string_view(reinterpret_cast<const char*>(a), sizeof(a))}},
      {"b", {"BF16", {2}, std::string_view(reinterpret_cast<const char*>(b), sizeof(b))}},
      {"empty", {"F32", {0, 4}, std::string_view()}}};
  const absl::StatusOr<std::string> bytes = SerializeSafetensors(tensors, {{"format", "pt"}});
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  uint64_t header_size = 0;
  std::memcpy(&header_size, bytes->data(), 8);
  EXPECT_EQ(header_size % 8, 0u);  // the data starts aligned

  const absl::StatusOr<SafetensorsFile> file = ParseSafetensors(*bytes, "x.safetensors");
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(file->tensors.size(), 3u);
  EXPECT_EQ(file->metadata.at("format"), "pt");
  const SafeTensor& got = file->tensors.at("a");
  EXPECT_EQ(got.dtype, "F32");
  EXPECT_EQ(got.shape, (std::vector<int64_t>{2, 3}));
  ASSERT_EQ(got.data.size(), sizeof(a));
  EXPECT_EQ(std::memcmp(got.data.data(), a, sizeof(a)), 0);
  EXPECT_EQ(file->tensors.at("b").shape, (std::vector<int64_t>{2}));
  EXPECT_EQ(std::memcmp(file->tensors.at("b").data.data(), b, sizeof(b)), 0);
  EXPECT_TRUE(file->tensors.at("empty").data.empty());
}

TEST(SafetensorsTest, SerializeRefusesBytesThatDoNotMatchTheShape) {
  const float a[2] = {1, 2};
  const absl::StatusOr<std::string> bytes = SerializeSafetensors(
      {{"w", {"F32", {3}, std::string_view(reinterpret_cast<const char*>(a), sizeof(a))}}});
  ASSERT_FALSE(bytes.ok());
  EXPECT_THAT(bytes.status().message(), HasSubstr("\"w\""));
}

struct BadCase {
  const char* name;
  std::string bytes;
  const char* expected;  // in the message
};

TEST(SafetensorsTest, AHostileFileIsRefusedNamingWhatIsWrong) {
  const std::string eight(8, 'x');
  const BadCase cases[] = {
      {"short", "abc", "shorter than its 8-byte header length"},
      {"header past the end", std::string("\xff\x00\x00\x00\x00\x00\x00\x00", 8) + "{}",
       "exceeds the file"},
      {"huge header", std::string("\xff\xff\xff\xff\xff\xff\xff\x7f", 8), "100 MB"},
      {"not json", FileOf("{nope", ""), "not a JSON object"},
      {"array", FileOf("[]", ""), "not a JSON object"},
      {"no dtype", FileOf(R"({"w":{"shape":[2],"data_offsets":[0,8]}})", eight), "\"w\" has no dtype"},
      {"unknown dtype", FileOf(R"({"w":{"dtype":"F8_E9","shape":[2],"data_offsets":[0,8]}})", eight),
       "F8_E9"},
      {"negative dim", FileOf(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", eight),
       "non-negative integer"},
      {"offsets outside",
       FileOf(R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", eight), "outside"},
      {"reversed offsets",
       FileOf(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", eight), "outside"},
      {"wrong size", FileOf(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", eight),
       "shape [3] make 12"},
      {"overflowing shape",
       FileOf(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})",
              eight),
       "too many"},
      {"overlap",
       FileOf(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
              R"("b":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
              eight),
       "overlaps"},
      {"hole", FileOf(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", eight),
       "belong to no tensor"},
      {"trailing bytes", FileOf(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", eight),
       "[4, 8) belong to no tensor"},
      {"metadata not strings", FileOf(R"({"__metadata__":{"k":1}})", ""), "not a string"},
  };
  for (const BadCase& c : cases) {
    const absl::StatusOr<SafetensorsFile> file = ParseSafetensors(c.bytes, "bad.safetensors");
    ASSERT_FALSE(file.ok()) << c.name;
    EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_THAT(file.status().message(), HasSubstr("bad.safetensors")) << c.name;
    EXPECT_THAT(file.status().message(), HasSubstr(c.expected)) << c.name;
  }
}

}  // namespace
}  // namespace paci
