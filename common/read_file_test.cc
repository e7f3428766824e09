#include "common/read_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "common/temp_dir.h"

namespace paci {
namespace {

using ::testing::HasSubstr;

std::string Write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(ReadFileToStringTest, ReadsTheWholeFileBinaryAndAll) {
  TempDir dir("read-file");
  const std::string text("line one\n\0binary\xff", 17);
  EXPECT_EQ(ReadFileToString(Write(dir.path() + "/f", text)).value(), text);
  EXPECT_EQ(ReadFileToString(Write(dir.path() + "/empty", "")).value(), "");
}

TEST(ReadFileToStringTest, AMissingFileOrAFolderIsNotFoundNamingThePathAndWhy) {
  TempDir dir("read-file");
  absl::StatusOr<std::string> missing = ReadFileToString(dir.path() + "/none");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(missing.status().message(),
            "cannot read " + dir.path() + "/none: No such file or directory");
  absl::StatusOr<std::string> folder = ReadFileToString(dir.path());
  EXPECT_EQ(folder.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(folder.status().message(), HasSubstr("Is a directory"));
}

TEST(ReadFileToStringTest, ADeviceOrAFifoIsRefusedWithoutWaiting) {
  absl::StatusOr<std::string> zero = ReadFileToString("/dev/zero");  // would never end
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(zero.status().message(), "/dev/zero is a character device, not a regular file");
  TempDir dir("read-file");
  const std::string fifo = dir.path() + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  absl::StatusOr<std::string> read = ReadFileToString(fifo);  // no writer: returns at once
  EXPECT_EQ(read.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(read.status().message(), fifo + " is a FIFO, not a regular file");
}

TEST(ReadFileToStringTest, AFileOverTheCapIsResourceExhausted) {
  TempDir dir("read-file");
  const std::string path = Write(dir.path() + "/big", std::string(1001, 'x'));
  absl::StatusOr<std::string> read = ReadFileToString(path, 1000);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(read.status().message(), path + " is larger than 1000 bytes");
  EXPECT_EQ(ReadFileToString(path, 1001).value().size(), 1001u);
}

}  // namespace
}  // namespace paci
