#include "tools/progress_printer.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace paci {
namespace {

std::string LossOrDash(const std::optional<double>& loss) {
  return loss.has_value() ? absl::StrFormat("%.3f", *loss) : "-";
}

constexpr double kMiB = 1024.0 * 1024.0;

}  // namespace

std::string FormatThousands(int64_t value) {
  std::string digits = absl::StrCat(value < 0 ? -static_cast<uint64_t>(value)
                                              : static_cast<uint64_t>(value));
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return value < 0 ? absl::StrCat("-", out) : out;
}

std::string FormatEta(absl::Duration duration) {
  const int64_t total = std::max<int64_t>(absl::ToInt64Seconds(duration), 0);
  const int64_t hours = total / 3600, minutes = total / 60 % 60, seconds = total % 60;
  return hours > 0 ? absl::StrFormat("%d:%02d:%02d", hours, minutes, seconds)
                   : absl::StrFormat("%d:%02d", minutes, seconds);
}

std::string FormatProgressLine(const ProgressView& view) {
  if (view.joined < view.num_stages) {
    return absl::StrCat("waiting for workers: ", view.joined, "/", view.num_stages, " workers placed");
  }
  return absl::StrCat(
      "step ", view.step, "/", view.total_steps, " | train ", LossOrDash(view.train_loss),
      " | val ", LossOrDash(view.validation_loss), " | ",
      FormatThousands(static_cast<int64_t>(view.tokens_per_second + 0.5)), " tok/s",
      " | drift max [", absl::StrJoin(view.drift_max, " "), "] | ETA ",
      view.eta.has_value() ? FormatEta(*view.eta) : "-");
}

bool IsAlreadyComplete(const v1::RunSummary& s) {
  return s.succeeded() && s.train_loss().empty() && s.steps() > 0 &&
         s.steps_completed() >= s.steps();
}

std::string FormatAlreadyComplete(const v1::RunSummary& s, const std::string& checkpoint_directory) {
  std::string out = absl::StrFormat(
      "%s is already complete: its checkpoint in %s is at step %d of %d, so there was nothing "
      "to train.\n",
      s.job_name(), checkpoint_directory, s.steps_completed(), s.steps());
  if (!s.validation_loss().empty()) {
    absl::StrAppendFormat(&out, "%-18s %.4f (of the weights it resumed)\n", "final val loss",
                          s.final_validation_loss());
  }
  absl::StrAppendFormat(&out,
                        "To train again from the start, remove %s or set checkpoint.directory to "
                        "another folder; to train on, raise training.steps.\n",
                        checkpoint_directory);
  return out;
}

std::string FormatSummaryTable(const v1::RunSummary& s) {
  std::string out;
  absl::StrAppendFormat(&out, "%-18s %s\n", "job", s.job_name());
  absl::StrAppendFormat(&out, "%-18s %s\n", "schedule", s.schedule());
  absl::StrAppendFormat(&out, "%-18s %d\n", "stages (P)", s.num_stages());
  if (s.data_parallel() > 1) absl::StrAppendFormat(&out, "%-18s %d\n", "replicas (R)", s.data_parallel());
  absl::StrAppendFormat(&out, "%-18s %d\n", "accumulation (a)", s.accumulation());
  absl::StrAppendFormat(&out, "%-18s %d\n", "drift limit (D)", s.drift_limit());
  if (s.global_batch() > 0) absl::StrAppendFormat(&out, "%-18s %d\n", "global batch", s.global_batch());
  if (!s.drift_correction().empty() && s.drift_correction() != "none") {
    absl::StrAppendFormat(&out, "%-18s %s\n", "drift correction", s.drift_correction());
  }
  if (s.warmup_steps() > 0) {
    absl::StrAppendFormat(&out, "%-18s %d steps with drift 0\n", "warm-up", s.warmup_steps());
  }
  absl::StrAppendFormat(&out, "%-18s %d/%d\n", "steps", s.steps_completed(), s.steps());
  absl::StrAppendFormat(&out, "%-18s %s\n", "final train loss",
                        s.train_loss().empty() ? "-" : absl::StrFormat("%.4f", s.final_train_loss()));
  absl::StrAppendFormat(&out, "%-18s %s\n", "final val loss",
                        s.validation_loss().empty()
                            ? "-"
                            : absl::StrFormat("%.4f", s.final_validation_loss()));
  absl::StrAppendFormat(&out, "%-18s %s\n", "tokens/s",
                        FormatThousands(static_cast<int64_t>(s.tokens_per_second() + 0.5)));
  absl::StrAppendFormat(&out, "%-18s %.1f\n", "wall seconds", s.wall_seconds());
  // runtime.precision as the stages resolved it: one line when they agree.
  const auto precision_of = [](const v1::StageSummary& st) {
    return st.precision_note().empty() ? st.precision()
                                       : absl::StrCat(st.precision(), " (", st.precision_note(), ")");
  };
  std::vector<std::string> precisions;
  for (const v1::StageSummary& st : s.stages()) {
    std::string one = precision_of(st);
    if (!st.precision().empty() &&
        std::find(precisions.begin(), precisions.end(), one) == precisions.end()) {
      precisions.push_back(std::move(one));
    }
  }
  if (precisions.size() == 1) {
    absl::StrAppendFormat(&out, "%-18s %s\n", "precision", precisions[0]);
  } else if (!precisions.empty()) {
    for (const v1::StageSummary& st : s.stages()) {
      absl::StrAppendFormat(&out, "%-18s %s\n", absl::StrCat("precision, stage ", st.stage()),
                            precision_of(st));
    }
  }
  // The cut (pipeline.partition): each stage's units and the busy seconds the
  // cost model predicted for it, beside the measured ones.
  const bool cut = !s.partition_boundaries().empty();
  if (cut) {
    absl::StrAppendFormat(&out, "%-18s %s [%s]%s\n", "partition", s.partition(),
                          absl::StrJoin(s.partition_boundaries(), ","),
                          s.partition_head_split() > 0
                              ? absl::StrCat(", the head's first ", s.partition_head_split(),
                                             " rows on the stage before the last")
                              : "");
  }
  absl::StrAppendFormat(&out, "\n%5s %11s %10s %9s %8s %8s %6s %13s", "stage", "drift/bound",
                        "mean drift", "opt steps", "busy s", "idle s", "idle %", "peak RSS MiB");
  absl::StrAppend(&out, cut ? absl::StrFormat(" %11s  %s\n", "pred busy s", "units") : "\n");
  for (const v1::StageSummary& st : s.stages()) {
    // With replicas, "1/r0": stage 1 of replica 0.
    const std::string stage = s.data_parallel() > 1 ? absl::StrCat(st.stage(), "/r", st.replica())
                                                    : absl::StrCat(st.stage());
    absl::StrAppendFormat(&out, "%5s %11s %10.2f %9d %8.1f %8.1f %6.1f %13.1f", stage,
                          absl::StrCat(st.drift_max(), "/", st.drift_bound()), st.drift_mean(),
                          st.optimizer_steps(), st.busy_seconds(), st.idle_seconds(),
                          100.0 * st.idle_fraction(), st.peak_rss_bytes() / kMiB);
    absl::StrAppend(&out, cut ? absl::StrFormat(" %11.1f  %s\n", st.predicted_busy_seconds(),
                                                st.units())
                              : "\n");
  }
  return out;
}

ProgressPrinter::ProgressPrinter(std::ostream& out, bool redraw_in_place,
                                 absl::Duration line_interval)
    : out_(out), redraw_in_place_(redraw_in_place), line_interval_(line_interval) {}

void ProgressPrinter::Update(const ProgressView& view, absl::Time now) {
  const std::string line = FormatProgressLine(view);
  if (redraw_in_place_) {
    // Pad with spaces to wipe the tail of a longer previous line.
    const size_t pad = drawn_width_ > line.size() ? drawn_width_ - line.size() : 0;
    out_ << '\r' << line << std::string(pad, ' ') << std::flush;
    drawn_width_ = line.size();
    drawn_line_ = line;
  } else if (now - last_line_time_ >= line_interval_) {
    out_ << line << '\n' << std::flush;
    last_line_time_ = now;
    last_line_ = line;
  }
}

void ProgressPrinter::BreakLine() {
  if (drawn_width_ > 0) out_ << '\n' << std::flush;
  drawn_width_ = 0;
}

void ProgressPrinter::PrintAbove(const std::string& line) {
  if (drawn_width_ == 0) {
    out_ << line << '\n' << std::flush;
    return;
  }
  // "\r\033[K": back to the start of the line and clear it.
  out_ << "\r\033[K" << line << '\n' << drawn_line_ << std::flush;
}

void ProgressPrinter::Finish(const ProgressView& view) {
  if (redraw_in_place_) {
    Update(view, absl::InfiniteFuture());
    BreakLine();
  } else if (FormatProgressLine(view) != last_line_) {
    Update(view, absl::InfiniteFuture());
  }
}

}  // namespace paci
