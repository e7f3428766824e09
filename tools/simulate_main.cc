// paci_simulate: plays a pipeline schedule in simulated time, with the same
// StageScheduler the workers run, for pipelines deeper than this machine can
// run. Stage costs are given in milliseconds, one value for every stage or
// one per stage (e.g. measured from a run's --trace, as bench/ does):
//
//   paci_simulate --schedule=paci --stages=64 --accumulation=63 --steps=100
//                 --forward_ms=10 --backward_ms=20 --link_ms=0.2 [--format=json]
//
// Or the stage costs come from the model, cut as the workers cut it
// (pipeline.partition, worker/model/partition.h): the FLOP model's cost of
// each partition unit at the given shapes, summed per stage, at --gflops
// FLOP-equivalents per second per stage:
//
//   paci_simulate --stages=8 --accumulation=8 --steps=100 --gflops=70
//                 --model=8192,32,256,4,128,4 --partition=balanced
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
#include "common/flag_usage.h"
#include "common/schedule_kind.h"
#include "common/status_macros.h"
#include "worker/model/partition.h"
#include "worker/pipeline/pipeline_simulator.h"

ABSL_FLAG(std::string, schedule, "paci",
          "a pipeline.schedule name, one of the schedule table's (an unknown one lists them)");
ABSL_FLAG(int, stages, 4, "pipeline stages (P)");
ABSL_FLAG(int, accumulation, 3, "micro-batches per optimizer step (a, or m for the flushes)");
ABSL_FLAG(int64_t, steps, 100, "optimizer steps");
ABSL_FLAG(int64_t, warmup_steps, 0,
          "pipeline.warmup_steps: the first steps drain the pipe at every step (drift 0)");
ABSL_FLAG(int64_t, eval_interval, 0, "steps between validation passes (0: only at the end)");
ABSL_FLAG(int, eval_micro_batches, 0, "forwards per validation pass (0: no validation)");
ABSL_FLAG(std::string, forward_ms, "1", "forward cost, sending included: one value or one per stage");
ABSL_FLAG(std::string, backward_ms, "2", "backward cost, sending included: one value or one per stage");
ABSL_FLAG(std::string, optimizer_ms, "0", "optimizer step cost: one value or one per stage");
ABSL_FLAG(std::string, eval_forward_ms, "0", "validation forward cost: one value or one per stage");
ABSL_FLAG(double, link_ms, 0, "from the end of a send to the tensor's arrival");
ABSL_FLAG(int64_t, tokens_per_micro_batch, 0, "for tokens/s: micro_batch_size * seq_len");
ABSL_FLAG(std::string, format, "table", "table or json");
ABSL_FLAG(std::string, model, "",
          "vocab_size,num_layers,d_model,num_heads,seq_len,micro_batch_size: stage costs from the "
          "FLOP model of each partition unit, cut by --partition (replaces the *_ms costs)");
ABSL_FLAG(std::string, partition, "balanced",
          "with --model: balanced, even or P-1 unit boundaries, as pipeline.partition");
ABSL_FLAG(double, gflops, 50, "with --model: FLOP-equivalents per second of one stage, in G");
ABSL_FLAG(std::string, unit_forward_ms, "",
          "with --model: measured forward cost of each partition unit (2 * num_layers + 2 values, "
          "as paci_worker --profile_units prints them), instead of the FLOP model");
ABSL_FLAG(std::string, unit_backward_ms, "", "with --unit_forward_ms: each unit's backward");
ABSL_FLAG(std::string, unit_optimizer_ms, "",
          "with --unit_forward_ms: each unit's optimizer step / accumulation (default 0)");

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

// Per-stage costs as given by --forward_ms ... --eval_forward_ms.
absl::StatusOr<std::vector<StageCosts>> StageCostsFromFlags(int stages) {
  std::vector<std::vector<double>> costs;
  for (const auto& [name, text] : std::vector<std::pair<std::string, std::string>>{
           {"forward_ms", absl::GetFlag(FLAGS_forward_ms)},
           {"backward_ms", absl::GetFlag(FLAGS_backward_ms)},
           {"optimizer_ms", absl::GetFlag(FLAGS_optimizer_ms)},
           {"eval_forward_ms", absl::GetFlag(FLAGS_eval_forward_ms)}}) {
    absl::StatusOr<std::vector<double>> parsed = ParseCosts(name, text, stages);
    if (!parsed.ok()) return parsed.status();
    costs.push_back(*parsed);
  }
  std::vector<StageCosts> out;
  for (int s = 0; s < stages; ++s) {
    out.push_back(StageCosts{costs[0][s], costs[1][s], costs[2][s], costs[3][s]});
  }
  return out;
}

// --model: vocab_size,num_layers,d_model,num_heads,seq_len,micro_batch_size.
absl::StatusOr<ModelShape> ModelFromFlag(const std::string& model, int accumulation) {
  std::vector<int> v;
  for (absl::string_view part : absl::StrSplit(model, ',')) {
    int x = 0;
    if (!absl::SimpleAtoi(part, &x) || x < 1) break;
    v.push_back(x);
  }
  if (v.size() != 6 || v[2] % v[3] != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--model: six positive whole numbers vocab_size,num_layers,d_model,num_heads,seq_len,"
        "micro_batch_size (num_heads dividing d_model), got ",
        model));
  }
  ModelShape shape;
  shape.vocab_size = v[0];
  shape.num_layers = v[1];
  shape.d_model = v[2];
  shape.num_heads = v[3];
  shape.seq_len = v[4];
  shape.micro_batch_size = v[5];
  shape.accumulation = std::max(1, accumulation);
  return shape;
}

// Unit costs in seconds from --unit_forward_ms ... (one per unit).
absl::StatusOr<std::vector<UnitCost>> UnitCostsFromFlags(int units) {
  std::vector<std::vector<double>> given;
  for (const auto& [name, text] : std::vector<std::pair<std::string, std::string>>{
           {"unit_forward_ms", absl::GetFlag(FLAGS_unit_forward_ms)},
           {"unit_backward_ms", absl::GetFlag(FLAGS_unit_backward_ms)},
           {"unit_optimizer_ms", absl::GetFlag(FLAGS_unit_optimizer_ms).empty()
                                     ? "0"
                                     : absl::GetFlag(FLAGS_unit_optimizer_ms)}}) {
    absl::StatusOr<std::vector<double>> parsed = ParseCosts(name, text, units);
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(parsed.status().message(), " (one per unit)"));
    }
    given.push_back(*parsed);
  }
  std::vector<UnitCost> out;
  for (int u = 0; u < units; ++u) out.push_back(UnitCost{given[0][u], given[1][u], given[2][u]});
  return out;
}

// Per-stage costs of the model cut as the workers cut it: its units priced by
// the FLOP model at --gflops, or as measured (--unit_*_ms).
absl::StatusOr<std::vector<StageCosts>> StageCostsFromModel(const PipelineSimulatorOptions& o,
                                                             int stages) {
  ASSIGN_OR_RETURN(const ModelShape shape,
                   ModelFromFlag(absl::GetFlag(FLAGS_model), o.accumulation));
  double rate = absl::GetFlag(FLAGS_gflops) * 1e9;
  std::vector<UnitCost> units = FlopUnitCosts(shape);
  if (!absl::GetFlag(FLAGS_unit_forward_ms).empty()) {
    ASSIGN_OR_RETURN(units, UnitCostsFromFlags(NumPartitionUnits(shape.num_layers)));
    rate = 1;  // already seconds
  }
  absl::StatusOr<PartitionPlan> plan =
      PlanPartitionWithCosts(units, o.num_stages, absl::GetFlag(FLAGS_partition));
  if (!plan.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--partition: ", plan.status().message()));
  }
  std::vector<StageCosts> out;
  for (int s = 0; s < stages; ++s) {
    StageCosts c;
    for (int u = plan->boundaries[s]; u < plan->boundaries[s + 1]; ++u) {
      c.forward += units[u].forward / rate;
      c.backward += units[u].backward / rate;
      c.optimizer_step += units[u].optimizer * shape.accumulation / rate;
    }
    c.eval_forward = c.forward;
    out.push_back(c);
  }
  std::cerr << "partition " << plan->mode << " [" << absl::StrJoin(plan->boundaries, ",")
            << "]\n";
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
  o.warmup_steps = absl::GetFlag(FLAGS_warmup_steps);
  o.eval_interval = absl::GetFlag(FLAGS_eval_interval);
  o.eval_micro_batches = absl::GetFlag(FLAGS_eval_micro_batches);
  o.link_latency = absl::GetFlag(FLAGS_link_ms) / 1000.0;
  const int stages = std::max(o.num_stages, 1);
  absl::StatusOr<std::vector<StageCosts>> costs = absl::GetFlag(FLAGS_model).empty()
                                                      ? StageCostsFromFlags(stages)
                                                      : StageCostsFromModel(o, stages);
  if (!costs.ok()) {
    std::cerr << "paci_simulate: " << costs.status().message() << "\n";
    return 2;
  }
  o.costs = *std::move(costs);
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
  paci::SetUsage(
      "simulates a pipeline schedule with the workers' StageScheduler: paci_simulate "
      "--schedule=paci --stages=P --accumulation=a --steps=N --forward_ms=F --backward_ms=B");
  absl::ParseCommandLine(argc, argv);
  return paci::Main();
}
