// paci_simulate: plays a pipeline schedule in simulated time, with the same
// StageScheduler the workers run, for pipelines deeper than this machine can
// run. Stage costs are given in milliseconds, one value for every stage or
// one per stage (e.g. measured from a run's --trace, as bench/ does):
//
//   paci_simulate --schedule=paci --stages=64 --accumulation=63 --steps=100
//                 --forward_ms=10 --backward_ms=20 --link_ms=0.2 [--format=json]
//
// Prints, per stage: utilization, idle fraction, the drift distribution
// against its bound and the activations in flight; and the throughput.

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/schedule_kind.h"
#include "worker/pipeline/pipeline_simulator.h"

ABSL_FLAG(std::string, schedule, "paci", "paci, 1f1b-flush, gpipe or async-1f1b");
ABSL_FLAG(int, stages, 4, "pipeline stages (P)");
ABSL_FLAG(int, accumulation, 3, "micro-batches per optimizer step (a, or m for the flushes)");
ABSL_FLAG(int64_t, steps, 100, "optimizer steps");
ABSL_FLAG(int64_t, eval_interval, 0, "steps between validation passes (0: only at the end)");
ABSL_FLAG(int, eval_micro_batches, 0, "forwards per validation pass (0: no validation)");
ABSL_FLAG(std::string, forward_ms, "1", "forward cost, sending included: one value or one per stage");
ABSL_FLAG(std::string, backward_ms, "2", "backward cost, sending included: one value or one per stage");
ABSL_FLAG(std::string, optimizer_ms, "0", "optimizer step cost: one value or one per stage");
ABSL_FLAG(std::string, eval_forward_ms, "0", "validation forward cost: one value or one per stage");
ABSL_FLAG(double, link_ms, 0, "from the end of a send to the tensor's arrival");
ABSL_FLAG(int64_t, tokens_per_micro_batch, 0, "for tokens/s: micro_batch_size * seq_len");
ABSL_FLAG(std::string, format, "table", "table or json");

namespace paci {
namespace {

absl::StatusOr<std::vector<double>> ParseCosts(const std::string& flag, const std::string& text,
                                               int stages) {
  std::vector<double> values;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    double v;
    if (!absl::SimpleAtod(part, &v)) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, ": not a number: ", part));
    }
    values.push_back(v / 1000.0);
  }
  if (values.size() != 1 && values.size() != static_cast<size_t>(stages)) {
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": give one value or ", stages,
                                                   " (one per stage), got ", values.size()));
  }
  if (values.size() == 1) values.assign(stages, values[0]);
  return values;
}

std::string Json(const PipelineSimulatorOptions& o, const PipelineSimulation& sim,
                 int64_t tokens_per_micro_batch) {
  std::string out = absl::StrFormat(
      "{\"schedule\": \"%s\", \"num_stages\": %d, \"accumulation\": %d, \"steps\": %d,\n"
      " \"seconds\": %.6f, \"micro_batches_per_second\": %.6f, \"tokens_per_second\": %.3f,\n"
      " \"stages\": [",
      ScheduleKindName(o.schedule), o.num_stages, o.accumulation, o.steps, sim.seconds,
      sim.micro_batches_per_second, sim.micro_batches_per_second * tokens_per_micro_batch);
  for (size_t s = 0; s < sim.stages.size(); ++s) {
    const StageSimulation& st = sim.stages[s];
    absl::StrAppendFormat(
        &out,
        "%s\n  {\"stage\": %d, \"busy_seconds\": %.6f, \"idle_seconds\": %.6f, "
        "\"utilization\": %.6f, \"idle_fraction\": %.6f, \"forwards\": %d, \"backwards\": %d, "
        "\"optimizer_steps\": %d, \"drift_bound\": %d, \"drift_max\": %d, \"drift_mean\": %.6f, "
        "\"drift_histogram\": [%s], \"max_in_flight\": %d, \"mean_in_flight\": %.6f}",
        s > 0 ? "," : "", s, st.busy_seconds, st.idle_seconds, st.utilization, st.idle_fraction,
        st.forwards, st.backwards, st.optimizer_steps, st.drift_bound, st.drift_max, st.drift_mean,
        absl::StrJoin(st.drift_histogram, ", "), st.max_in_flight, st.mean_in_flight);
  }
  absl::StrAppend(&out, "\n]}\n");
  return out;
}

std::string Table(const PipelineSimulatorOptions& o, const PipelineSimulation& sim,
                  int64_t tokens_per_micro_batch) {
  std::string out = absl::StrFormat(
      "%s, P=%d, a=%d, %d steps: %.3f s simulated, %.1f micro-batches/s", ScheduleKindName(o.schedule),
      o.num_stages, o.accumulation, o.steps, sim.seconds, sim.micro_batches_per_second);
  if (tokens_per_micro_batch > 0) {
    absl::StrAppendFormat(&out, ", %.0f tokens/s", sim.micro_batches_per_second * tokens_per_micro_batch);
  }
  absl::StrAppendFormat(&out, "\n\n%5s %6s %6s %11s %10s %-24s %9s %9s\n", "stage", "util", "idle",
                        "drift/bound", "mean drift", "drift histogram", "max in-fl", "mean in-fl");
  for (size_t s = 0; s < sim.stages.size(); ++s) {
    const StageSimulation& st = sim.stages[s];
    absl::StrAppendFormat(&out, "%5d %6.3f %6.3f %11s %10.3f %-24s %9d %9.2f\n", s, st.utilization,
                          st.idle_fraction, absl::StrCat(st.drift_max, "/", st.drift_bound),
                          st.drift_mean, absl::StrCat("[", absl::StrJoin(st.drift_histogram, " "), "]"),
                          st.max_in_flight, st.mean_in_flight);
  }
  return out;
}

int Main() {
  PipelineSimulatorOptions o;
  const absl::StatusOr<ScheduleKind> kind = ParseScheduleKind(absl::GetFlag(FLAGS_schedule));
  if (!kind.ok()) {
    std::cerr << "paci_simulate: --schedule: " << kind.status().message() << "\n";
    return 2;
  }
  o.schedule = *kind;
  o.num_stages = absl::GetFlag(FLAGS_stages);
  o.accumulation = absl::GetFlag(FLAGS_accumulation);
  o.steps = absl::GetFlag(FLAGS_steps);
  o.eval_interval = absl::GetFlag(FLAGS_eval_interval);
  o.eval_micro_batches = absl::GetFlag(FLAGS_eval_micro_batches);
  o.link_latency = absl::GetFlag(FLAGS_link_ms) / 1000.0;
  const int stages = std::max(o.num_stages, 1);
  std::vector<std::vector<double>> costs;
  for (const auto& [name, text] : std::vector<std::pair<std::string, std::string>>{
           {"forward_ms", absl::GetFlag(FLAGS_forward_ms)},
           {"backward_ms", absl::GetFlag(FLAGS_backward_ms)},
           {"optimizer_ms", absl::GetFlag(FLAGS_optimizer_ms)},
           {"eval_forward_ms", absl::GetFlag(FLAGS_eval_forward_ms)}}) {
    absl::StatusOr<std::vector<double>> parsed = ParseCosts(name, text, stages);
    if (!parsed.ok()) {
      std::cerr << "paci_simulate: " << parsed.status().message() << "\n";
      return 2;
    }
    costs.push_back(*parsed);
  }
  for (int s = 0; s < stages; ++s) {
    o.costs.push_back(StageCosts{costs[0][s], costs[1][s], costs[2][s], costs[3][s]});
  }
  const absl::StatusOr<PipelineSimulation> sim = SimulatePipeline(o);
  if (!sim.ok()) {
    std::cerr << "paci_simulate: " << sim.status().message() << "\n";
    return sim.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  const int64_t tokens = absl::GetFlag(FLAGS_tokens_per_micro_batch);
  const std::string format = absl::GetFlag(FLAGS_format);
  if (format == "json") {
    std::cout << Json(o, *sim, tokens);
  } else if (format == "table") {
    std::cout << Table(o, *sim, tokens);
  } else {
    std::cerr << "paci_simulate: --format: table or json, got " << format << "\n";
    return 2;
  }
  return 0;
}

}  // namespace
}  // namespace paci

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "simulates a pipeline schedule with the workers' StageScheduler: paci_simulate "
      "--schedule=paci --stages=P --accumulation=a --steps=N --forward_ms=F --backward_ms=B");
  absl::ParseCommandLine(argc, argv);
  return paci::Main();
}
