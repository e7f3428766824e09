#include "tools/prepare_data.h"

#include <algorithm>
#include <fstream>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "tools/progress_printer.h"

namespace paci {
namespace {

// The bar: bytes done of the total, tokens and tokens per second. Redrawn in
// place at most every 100 ms on a terminal, otherwise a line every
// progress_interval. Not thread-safe: the writing thread's.
class ProgressBar final : public DatasetProgress {
 public:
  explicit ProgressBar(const PrepareDataOptions& options)
      : out_(options.progress),
        redraw_in_place_(options.redraw_in_place),
        interval_(redraw_in_place_ ? absl::Milliseconds(100) : options.progress_interval) {}

  void Start(const std::string& pass, int64_t total_bytes) override {
    pass_ = pass;
    total_bytes_ = total_bytes;
    start_ = absl::Now();
    last_drawn_ = absl::InfinitePast();
  }
  // Draws the bar when it is due; the end of the pass is left to Finish.
  void Update(int64_t bytes, int64_t tokens) override {
    if (bytes < total_bytes_) Draw(bytes, tokens, /*last=*/false);
  }
  // Draws the bar of the whole pass and ends its line.
  void Finish(int64_t bytes, int64_t tokens) override { Draw(bytes, tokens, /*last=*/true); }
  void Say(const std::string& line) override {
    if (out_ != nullptr) *out_ << line << std::endl;
  }

 private:
  void Draw(int64_t bytes, int64_t tokens, bool last) {
    const absl::Time now = absl::Now();
    if (out_ == nullptr || (!last && now - last_drawn_ < interval_)) return;
    last_drawn_ = now;
    const double fraction = total_bytes_ > 0 ? static_cast<double>(bytes) / total_bytes_ : 1;
    const int filled = static_cast<int>(fraction * 30);
    std::string line = absl::StrFormat("%-10s [%s%s] %3d%% %.1f/%.1f MB", pass_,
                                       std::string(filled, '#'), std::string(30 - filled, '-'),
                                       static_cast<int>(fraction * 100), bytes / 1e6,
                                       total_bytes_ / 1e6);
    if (tokens > 0) {
      const double seconds = std::max(1e-3, absl::ToDoubleSeconds(now - start_));
      absl::StrAppend(&line, " | ", FormatThousands(tokens), " tokens | ",
                      FormatThousands(static_cast<int64_t>(tokens / seconds)), " tokens/s");
    }
    *out_ << (redraw_in_place_ ? "\r" : "") << line << (redraw_in_place_ && !last ? "" : "\n")
          << std::flush;
  }

  std::ostream* const out_;
  const bool redraw_in_place_;
  const absl::Duration interval_;
  int64_t total_bytes_ = 0;
  std::string pass_;
  absl::Time start_;
  absl::Time last_drawn_ = absl::InfinitePast();
};

// What is said once the dataset is there: a line of what it holds (and the
// skipped JSONL lines), or the error.
std::string ClosingLines(const PrepareDataOptions& options,
                         const absl::StatusOr<PrepareDataResult>& result, absl::Duration took) {
  if (!result.ok()) return absl::StrCat("prepare-data: ", result.status().message(), "\n");
  if (result->reused) {
    return absl::StrFormat(
        "kept %s: it holds this dataset already (%d shard%s, %s tokens, vocabulary %s (%s)), "
        "made from the same inputs and options; nothing redone\n",
        options.out, result->shards, result->shards == 1 ? "" : "s",
        FormatThousands(result->tokens), FormatThousands(result->vocab_size),
        result->tokenizer_kind);
  }
  const double seconds = std::max(1e-3, absl::ToDoubleSeconds(took));
  std::string lines = absl::StrFormat(
      "wrote %s: %d shard%s, %s tokens, %.1f MB in %.1f s (%.1f MB/s, %s tokens/s), "
      "vocabulary %s (%s)\n",
      options.out, result->shards, result->shards == 1 ? "" : "s",
      FormatThousands(result->tokens), result->bytes / 1e6, seconds,
      result->bytes / 1e6 / seconds,
      FormatThousands(static_cast<int64_t>(result->tokens / seconds)),
      FormatThousands(result->vocab_size), result->tokenizer_kind);
  if (result->skipped_lines > 0) {
    absl::StrAppend(&lines, "skipped ", FormatThousands(result->skipped_lines),
                    " bad .jsonl lines (--skip_bad_lines)\n");
  }
  return lines;
}

}  // namespace

absl::StatusOr<PrepareDataResult> PrepareData(const PrepareDataOptions& options) {
  const absl::Time start = absl::Now();
  ProgressBar progress(options);
  absl::StatusOr<DatasetSummary> result = WriteDataset(options, &progress);
  const std::string closing = ClosingLines(options, result, absl::Now() - start);
  if (result.ok() && options.progress != nullptr) *options.progress << closing;
  if (!options.message_file.empty()) {
    // Written in place, not renamed over: a pod's /dev/termination-log is a
    // file the kubelet mounts, in a folder the container's user cannot write.
    std::ofstream message(options.message_file, std::ios::binary | std::ios::trunc);
    message << closing;
    message.close();
    if (!message && result.ok()) {
      return absl::UnavailableError(
          absl::StrCat("--message_file: ", options.message_file, ": cannot write it"));
    }
  }
  return result;
}

}  // namespace paci
