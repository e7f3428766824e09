#include "tools/parity.h"

#include <filesystem>
#include <utility>

#include <google/protobuf/util/json_util.h>
#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/atomic_file.h"
#include "common/job_spec.h"
#include "common/process.h"
#include "common/status_macros.h"
#include "tools/local_launcher.h"

namespace paci {
namespace {

using nlohmann::json;

std::string Times(const std::optional<double>& speedup) {
  return speedup ? absl::StrFormat("%.2fx", *speedup) : "not reached";
}

json OptionalNumber(const std::optional<double>& value) {
  return value ? json(*value) : json(nullptr);
}

// A run's name for the plot's legend.
std::string RunLabel(const v1::RunSummary& run, int seed) {
  return absl::StrCat(run.schedule(), " seed ", seed);
}

// The spec as JSON (a YAML document too), the proto's field names.
absl::Status WriteSpec(const std::filesystem::path& path, const v1::JobSpec& spec) {
  std::string text;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  options.add_whitespace = true;
  const auto printed = google::protobuf::util::MessageToJsonString(spec, &text, options);
  if (!printed.ok()) return absl::InternalError(printed.ToString());
  return WriteFileAtomically(path.string(), text);
}

// gnuplot SCRIPT, its output this process's: NotFound when no gnuplot is on
// the PATH, Internal when it failed.
absl::Status RunGnuplot(const std::string& script) {
  ChildProcesses children;
  ProcessCommand command;
  command.binary = "gnuplot";
  command.args = {script};
  command.search_path = true;
  command.stdin_from_null = true;
  ASSIGN_OR_RETURN(const int index, children.Start(command));
  const ProcessExit exit = children.Wait(index);
  if (!exit.succeeded()) return absl::InternalError(absl::StrCat("gnuplot ", exit.ToString()));
  return absl::OkStatus();
}

}  // namespace

std::string ParityTable(const ParityReport& report) {
  std::string text =
      "| seed | validation loss | the flush's | gap | tokens/s | the flush's | to the flush's "
      "loss at 75% | to its final loss |\n"
      "|---:|---:|---:|---:|---:|---:|---:|---:|\n";
  for (const ParitySeed& seed : report.seeds) {
    absl::StrAppendFormat(&text, "| %d | %.4f | %.4f | %+.2f%% | %.0f | %.0f | %s | %s |\n",
                          seed.seed, seed.job_loss, seed.flush_loss, seed.gap_pct,
                          seed.job_tokens_per_second, seed.flush_tokens_per_second,
                          Times(seed.speedup_75), Times(seed.speedup_final));
  }
  absl::StrAppendFormat(
      &text, "| mean | %.4f | %.4f | %+.2f%% (spread %.2f) | %.2fx the flush's | | %s | %s |\n\n",
      report.mean_job_loss, report.mean_flush_loss, report.mean_gap_pct, report.gap_spread_pct,
      report.throughput_ratio, Times(report.mean_speedup_75), Times(report.mean_speedup_final));
  absl::StrAppendFormat(
      &text,
      "%s (%s, %d stages, global batch %d, %d steps, drift correction %s, warm-up %d steps) "
      "against its flush twin (1f1b-flush, the same model, data, batch and optimizer), paired "
      "by seed. Gap: final validation loss over the flush's (the flush's own seed spread: "
      "%.4f). Speed-up: the flush's wall seconds to its loss over this run's (above 1: "
      "sooner).\n",
      report.job_name, report.schedule, report.num_stages, report.global_batch, report.steps,
      report.correction.empty() ? "none" : report.correction, report.warmup_steps,
      report.flush_loss_spread);
  return text;
}

std::string ParityJson(const ParityReport& report) {
  json seeds = json::array();
  for (const ParitySeed& seed : report.seeds) {
    seeds.push_back({{"seed", seed.seed},
                     {"validation_loss", seed.job_loss},
                     {"flush_validation_loss", seed.flush_loss},
                     {"gap_pct", seed.gap_pct},
                     {"tokens_per_second", seed.job_tokens_per_second},
                     {"flush_tokens_per_second", seed.flush_tokens_per_second},
                     {"speedup_75", OptionalNumber(seed.speedup_75)},
                     {"speedup_final", OptionalNumber(seed.speedup_final)}});
  }
  return json{{"job", report.job_name},
              {"schedule", report.schedule},
              {"drift_correction", report.correction},
              {"warmup_steps", report.warmup_steps},
              {"num_stages", report.num_stages},
              {"steps", report.steps},
              {"global_batch", report.global_batch},
              {"seeds", seeds},
              {"mean_gap_pct", report.mean_gap_pct},
              {"gap_spread_pct", report.gap_spread_pct},
              {"mean_validation_loss", report.mean_job_loss},
              {"mean_flush_validation_loss", report.mean_flush_loss},
              {"flush_loss_spread", report.flush_loss_spread},
              {"throughput_ratio", report.throughput_ratio},
              {"mean_speedup_75", OptionalNumber(report.mean_speedup_75)},
              {"mean_speedup_final", OptionalNumber(report.mean_speedup_final)}}
             .dump(2) +
         "\n";
}

std::string ParityPlotData(const std::vector<ParityPair>& pairs) {
  std::string text;
  for (const ParityPair& pair : pairs) {
    for (const v1::RunSummary* run : {&pair.job, &pair.flush}) {
      absl::StrAppend(&text, "# ", RunLabel(*run, pair.seed), "\n");
      for (const v1::LossPoint& point : run->validation_loss()) {
        absl::StrAppendFormat(&text, "%.3f %.6f\n", point.seconds(), point.loss());
      }
      text += "\n\n";  // the next gnuplot index
    }
  }
  return text;
}

std::string ParityPlotScript(const ParityReport& report, const std::vector<ParityPair>& pairs,
                             const std::string& data_path, const std::string& png_path) {
  std::vector<std::string> plots;
  for (size_t i = 0; i < pairs.size(); ++i) {
    // The job's curves solid and blue, the flush's dashed and grey, one index per run.
    plots.push_back(absl::StrFormat(
        "'%s' index %d with linespoints lw 2 pt 7 ps 0.5 lc rgb '#1f77b4' title '%s'", data_path,
        2 * i, RunLabel(pairs[i].job, pairs[i].seed)));
    plots.push_back(absl::StrFormat(
        "'%s' index %d with linespoints lw 2 dt 2 pt 6 ps 0.5 lc rgb '#7f7f7f' title '%s'",
        data_path, 2 * i + 1, RunLabel(pairs[i].flush, pairs[i].seed)));
  }
  return absl::StrCat(
      "set terminal pngcairo size 1000,560 font ',11' noenhanced\n", "set output '", png_path, "'\n",
      "set title '", report.job_name, ": validation loss against wall time (gap to the flush ",
      absl::StrFormat("%+.2f%%", report.mean_gap_pct), ", ",
      absl::StrFormat("%.2fx", report.throughput_ratio), " its tokens/s)'\n",
      "set xlabel 'seconds since training began'\nset ylabel 'validation loss'\n",
      "set key top right\nset grid\n", "plot ", absl::StrJoin(plots, ", \\\n     "), "\n");
}

int RunParity(const ParityOptions& options) {
  std::ostream& out = *options.launch.out;
  absl::StatusOr<v1::JobSpec> spec = LoadAndValidateJobSpec(options.spec_path);
  if (!spec.ok()) {
    out << "pacictl: parity: " << spec.status().message() << "\n";
    return kExitUsage;
  }
  if (const absl::Status schedule = CheckParitySchedule(*spec); !schedule.ok()) {
    out << "pacictl: parity: " << schedule.message() << "\n";
    return kExitUsage;
  }
  if (options.seeds.empty()) {
    out << "pacictl: parity: --seeds: give at least one seed\n";
    return kExitUsage;
  }
  if (options.steps < 0) {
    out << "pacictl: parity: --steps: must be at least 1 (or 0 for the spec's), got "
        << options.steps << "\n";
    return kExitUsage;
  }
  const std::filesystem::path dir =
      options.out_dir.empty() ? std::filesystem::path("parity-" + spec->name())
                              : std::filesystem::path(options.out_dir);
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    out << "pacictl: parity: cannot make " << dir.string() << ": " << error.message() << "\n";
    return kExitTrainingFailed;
  }
  std::vector<ParityPair> pairs;
  const int runs = 2 * static_cast<int>(options.seeds.size());
  int run_number = 0;
  for (int seed : options.seeds) {
    ParityPair pair;
    pair.seed = seed;
    for (const bool flush : {false, true}) {
      absl::StatusOr<v1::JobSpec> derived =
          LoadAndValidateJobSpec(options.spec_path, [&](v1::JobSpec* written) {
            MakeParityRun(seed, options.steps, flush ? kParityFlushRole : kParityJobRole, written);
            if (flush) MakeFlushTwin(written);
          });
      if (!derived.ok()) {
        out << "pacictl: parity: " << (flush ? "the flush twin: " : "the shortened run: ")
            << derived.status().message() << "\n";
        return kExitUsage;
      }
      const v1::JobSpec& run = *derived;
      const std::filesystem::path spec_path = dir / (run.name() + ".json");
      const std::filesystem::path summary_path = dir / (run.name() + ".summary.json");
      if (const absl::Status written = WriteSpec(spec_path, run); !written.ok()) {
        out << "pacictl: parity: " << written.message() << "\n";
        return kExitTrainingFailed;
      }
      out << "parity: run " << ++run_number << " of " << runs << ": " << run.name() << " ("
          << run.pipeline().schedule() << ", seed " << seed << ")\n";
      LocalLauncherOptions launch = options.launch;
      launch.spec_path = spec_path.string();
      launch.summary_path = summary_path.string();
      launch.summary = flush ? &pair.flush : &pair.job;
      const int code = LocalLauncher(launch).Run();
      if (code != kExitSucceeded) {
        out << "pacictl: parity: run " << run.name() << " failed (exit " << code
            << "); its spec is " << spec_path.string() << "\n";
        return code;
      }
    }
    pairs.push_back(std::move(pair));
  }
  absl::StatusOr<ParityReport> report = CompareParity(pairs);
  if (!report.ok()) {
    out << "pacictl: parity: " << report.status().message() << "\n";
    return kExitTrainingFailed;
  }
  report->job_name = spec->name();  // the job's, not its first run's
  const std::string table = ParityTable(*report);
  const std::filesystem::path data = dir / "parity.dat", script = dir / "parity.gp",
                              png = dir / "parity.png";
  for (const auto& [path, text] :
       {std::pair{dir / "parity.md", table}, std::pair{dir / "parity.json", ParityJson(*report)},
        std::pair{data, ParityPlotData(pairs)},
        std::pair{script, ParityPlotScript(*report, pairs, data.string(), png.string())}}) {
    if (const absl::Status written = WriteFileAtomically(path.string(), text); !written.ok()) {
      out << "pacictl: parity: " << written.message() << "\n";
      return kExitTrainingFailed;
    }
  }
  out << "\n" << table << "\n";
  if (report->warmup_steps >= report->steps) {
    out << "parity: the job's warm-up (" << report->warmup_steps << " steps) covers the whole "
        << report->steps << "-step run: it ran as the flush does; compare over more steps\n";
  }
  if (const absl::Status plotted = RunGnuplot(script.string()); absl::IsNotFound(plotted)) {
    out << "parity: no gnuplot on the PATH: the plot's script is " << script.string() << "\n";
  } else if (!plotted.ok()) {
    out << "parity: " << plotted.message() << " on " << script.string() << "; no plot\n";
  } else {
    out << "parity: the plot is " << png.string() << "\n";
  }
  out << "parity: table, figures and runs in " << dir.string() << "\n";
  return kExitSucceeded;
}

}  // namespace paci
