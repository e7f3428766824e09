#include "worker/data/text_inputs.h"

#include <glob.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "nlohmann/json.hpp"
#include "worker/data/dataset_writer.h"

namespace paci {
namespace {

namespace fs = std::filesystem;

// Appends the regular files of `dir`, sorted by name.
absl::Status AppendFolder(const std::string& dir, std::vector<std::string>* files) {
  std::vector<std::string> found;
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, error)) {
    if (entry.is_regular_file()) found.push_back(entry.path().string());
  }
  if (error) {
    return absl::NotFoundError(absl::StrCat(dir, ": cannot list: ", error.message()));
  }
  std::sort(found.begin(), found.end());
  files->insert(files->end(), found.begin(), found.end());
  return absl::OkStatus();
}

// The paths `pattern` matches, sorted; none when it matches nothing.
std::vector<std::string> Glob(const std::string& pattern) {
  glob_t matches;
  std::vector<std::string> paths;
  if (glob(pattern.c_str(), 0, nullptr, &matches) == 0) {
    paths.assign(matches.gl_pathv, matches.gl_pathv + matches.gl_pathc);
  }
  globfree(&matches);
  return paths;
}

}  // namespace

namespace dataset_internal {

absl::StatusOr<InputFile> InputFile::Open(const std::string& path) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) {
    return absl::NotFoundError(absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  }
  gzbuffer(file, 1 << 17);
  return InputFile(path, file);
}

InputFile::InputFile(InputFile&& other) noexcept
    : path_(std::move(other.path_)), file_(std::exchange(other.file_, nullptr)) {}

InputFile::~InputFile() {
  if (file_ != nullptr) gzclose(file_);
}

absl::StatusOr<size_t> InputFile::Read(size_t n, std::string* out) {
  const size_t size = out->size();
  out->resize(size + n);
  const int read = gzread(file_, out->data() + size, static_cast<unsigned>(n));
  int code = Z_OK;
  const char* error = gzerror(file_, &code);
  // A gzip stream cut short reads as its end, with Z_BUF_ERROR kept for gzerror.
  if (read < 0 || (read == 0 && code != Z_OK)) {
    out->resize(size);
    return absl::NotFoundError(absl::StrCat("cannot read ", path_, ": ", error,
                                            code == Z_BUF_ERROR ? " (truncated?)" : ""));
  }
  out->resize(size + static_cast<size_t>(read));
  return static_cast<size_t>(read);
}

bool IsJsonl(const std::string& path) {
  return absl::EndsWith(path, ".jsonl") || absl::EndsWith(path, ".jsonl.gz");
}

absl::StatusOr<InputText> InputText::Open(const std::string& path,
                                          const JsonlOptions& jsonl) {
  ASSIGN_OR_RETURN(InputFile file, InputFile::Open(path));
  return InputText(path, std::move(file), IsJsonl(path) ? &jsonl : nullptr);
}

absl::StatusOr<size_t> InputText::Read(size_t n, std::string* out) {
  if (jsonl_ == nullptr) return file_.Read(n, out);
  const size_t size = out->size();
  std::string line;
  while (out->size() - size < n) {
    ASSIGN_OR_RETURN(const bool more, NextLine(&line));
    if (!more) break;
    RETURN_IF_ERROR(AppendDocument(line, out));
  }
  return out->size() - size;
}

absl::StatusOr<bool> InputText::NextLine(std::string* line) {
  size_t newline;
  while ((newline = buffer_.find('\n', scanned_)) == std::string::npos) {
    scanned_ = buffer_.size();
    if (buffer_.size() > kMaxLineBytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(path_, ":", line_number_ + 1, ": a line longer than ", kMaxLineBytes,
                       " bytes: a JSONL document must be shorter"));
    }
    ASSIGN_OR_RETURN(const size_t read, file_.Read(size_t{1} << 16, &buffer_));
    if (read == 0) break;
  }
  if (newline == std::string::npos && buffer_.empty()) return false;
  const size_t end = newline == std::string::npos ? buffer_.size() : newline;
  line->assign(buffer_, 0, end);
  buffer_.erase(0, std::min(buffer_.size(), end + 1));
  scanned_ = 0;
  ++line_number_;
  return true;
}

absl::Status InputText::AppendDocument(std::string_view line, std::string* out) {
  if (line.find_first_not_of(" \t\r") == std::string_view::npos) return absl::OkStatus();
  const nlohmann::json document =
      nlohmann::json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
  std::string problem;
  if (document.is_discarded()) {
    problem = "not JSON";
  } else if (!document.is_object()) {
    problem = "not a JSON object";
  } else if (const auto text = document.find(jsonl_->text_field); text == document.end()) {
    problem = absl::StrCat("has no field \"", jsonl_->text_field, "\" (--text_field)");
  } else if (!text->is_string()) {
    problem = absl::StrCat("field \"", jsonl_->text_field, "\" is not a string");
  } else {
    const std::string& value = text->get_ref<const std::string&>();
    absl::StrAppend(out, value, "\n");
    return absl::OkStatus();
  }
  const std::string where = absl::StrCat(path_, ":", line_number_, ": ", problem);
  if (!jsonl_->skip_bad_lines) {
    return absl::InvalidArgumentError(absl::StrCat(where, " (--skip_bad_lines goes on)"));
  }
  if (jsonl_->skipped) jsonl_->skipped(where);
  return absl::OkStatus();
}

absl::StatusOr<bool> ChunkReader::Next(Chunk* chunk) {
  while (true) {
    if (!in_) {
      if (next_file_ == files_.size()) return false;
      ASSIGN_OR_RETURN(InputText in, InputText::Open(files_[next_file_], jsonl_));
      in_.emplace(std::move(in));
      file_ = next_file_++;
      offset_ = 0;
      at_end_ = false;
      buffer_.clear();
      scanned_ = 0;
    }
    const size_t from = std::max(chunk_bytes_, scanned_);
    const size_t cut = buffer_.size() > chunk_bytes_ ? Cut(from) : std::string::npos;
    if (cut != std::string::npos || (at_end_ && !buffer_.empty())) {
      const size_t end = cut != std::string::npos ? cut : buffer_.size();
      *chunk = {file_, offset_, buffer_.substr(0, end), done_bytes_ + in_->offset()};
      buffer_.erase(0, end);
      offset_ += end;
      scanned_ = 0;
      return true;
    }
    if (buffer_.size() > from) {
      // The next search starts at the last newline: its cut may depend on
      // what is read next.
      const size_t last = std::string_view(buffer_).substr(from).rfind('\n');
      scanned_ = last == std::string::npos ? buffer_.size() : from + last;
    }
    if (!at_end_ && buffer_.size() > chunk_bytes_ + kMaxLineBytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          files_[file_], ": no newline in the ", buffer_.size(), " bytes of text from offset ",
          offset_, ": a line longer than ", kMaxLineBytes, " bytes is refused"));
    }
    if (at_end_) {
      std::error_code error;
      done_bytes_ += static_cast<int64_t>(fs::file_size(files_[file_], error));
      in_.reset();
      continue;
    }
    ASSIGN_OR_RETURN(const size_t read, in_->Read(chunk_bytes_, &buffer_));
    at_end_ = read == 0;
  }
}

size_t ChunkReader::Cut(size_t from) const {
  if (tokenizer_ != nullptr) return tokenizer_->NextCut(buffer_, from);
  const size_t newline = buffer_.find('\n', from);
  return newline == std::string::npos ? newline : newline + 1;
}

}  // namespace dataset_internal

// Declared, with its contract, in dataset_writer.h.
absl::StatusOr<std::vector<std::string>> ExpandInputs(const std::vector<std::string>& inputs) {
  if (inputs.empty()) {
    return absl::InvalidArgumentError("no inputs: give text files, folders or globs");
  }
  std::vector<std::string> files;
  for (const std::string& input : inputs) {
    std::error_code error;
    const bool exists = fs::exists(input, error);
    const std::vector<std::string> matches =
        exists ? std::vector<std::string>{input} : Glob(input);
    if (matches.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(input, ": no such file or folder, and no file matches it as a glob"));
    }
    for (const std::string& path : matches) {
      if (fs::is_directory(path, error)) {
        RETURN_IF_ERROR(AppendFolder(path, &files));
      } else if (fs::is_regular_file(path, error)) {
        files.push_back(path);
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": neither a regular file nor a folder"));
      }
    }
  }
  return files;
}

}  // namespace paci
