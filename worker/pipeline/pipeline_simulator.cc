#include "worker/pipeline/pipeline_simulator.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <limits>

#include "absl/strings/str_cat.h"
#include "worker/pipeline/stage_scheduler.h"

namespace paci {
namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();

struct Message {
  double arrival;
  uint64_t micro_batch_id;
  bool eval;  // a validation activation (a control frame), not a training one
};

struct SimStage {
  explicit SimStage(const StageSchedulerOptions& options) : scheduler(options) {}

  StageScheduler scheduler;
  std::deque<Message> activations;  // from stage s-1, in the order sent
  std::deque<Message> gradients;    // from stage s+1, in the order sent
  double free_at = 0;               // the end of the task it is running
  int eval_left = 0;                // stage 0: validation forwards still to run at this drain
  bool done = false;                // stage 0: the scheduler said kDone
  double busy = 0;
  double in_flight_seconds = 0;     // integral of in_flight() over time
  StageSimulation result;
};

absl::Status CheckOptions(const PipelineSimulatorOptions& o) {
  if (o.num_stages < 1 || o.num_stages > PipelineSimulatorOptions::kMaxStages) {
    return absl::InvalidArgumentError(absl::StrCat("num_stages: must be 1..",
                                                   PipelineSimulatorOptions::kMaxStages,
                                                   ", got ", o.num_stages));
  }
  if (o.accumulation < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("accumulation: must be at least 1, got ", o.accumulation));
  }
  if (o.steps < 1) {
    return absl::InvalidArgumentError(absl::StrCat("steps: must be at least 1, got ", o.steps));
  }
  if (o.eval_interval < 0 || o.eval_micro_batches < 0) {
    return absl::InvalidArgumentError("eval_interval, eval_micro_batches: must not be negative");
  }
  const double tasks = static_cast<double>(o.steps) * o.accumulation * o.num_stages;
  if (tasks > static_cast<double>(PipelineSimulatorOptions::kMaxTasks)) {
    return absl::InvalidArgumentError(
        absl::StrCat("steps * accumulation * num_stages: must be at most ",
                     PipelineSimulatorOptions::kMaxTasks, ", got ", tasks));
  }
  if (o.costs.size() != 1 && o.costs.size() != static_cast<size_t>(o.num_stages)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "costs: need one entry for all stages or one per stage (", o.num_stages, "), got ",
        o.costs.size()));
  }
  for (const StageCosts& c : o.costs) {
    for (double v : {c.forward, c.backward, c.optimizer_step, c.eval_forward}) {
      if (!(v >= 0) || !std::isfinite(v)) {
        return absl::InvalidArgumentError(
            absl::StrCat("costs: must be finite and not negative, got ", v));
      }
    }
  }
  if (!(o.link_latency >= 0) || !std::isfinite(o.link_latency)) {
    return absl::InvalidArgumentError(
        absl::StrCat("link_latency: must be finite and not negative, got ", o.link_latency));
  }
  return absl::OkStatus();
}

class Simulation {
 public:
  explicit Simulation(const PipelineSimulatorOptions& options) : o_(options) {
    for (int s = 0; s < o_.num_stages; ++s) {
      StageSchedulerOptions so;
      so.schedule = o_.schedule;
      so.num_stages = o_.num_stages;
      so.stage = s;
      so.accumulation = o_.accumulation;
      so.total_steps = o_.steps;
      so.warmup_steps = o_.warmup_steps;
      so.eval_interval = o_.eval_micro_batches > 0 ? o_.eval_interval : 0;
      so.evaluates = o_.eval_micro_batches > 0;
      stages_.emplace_back(so);
      stages_.back().result.drift_bound = stages_.back().scheduler.drift_bound();
    }
  }

  absl::StatusOr<PipelineSimulation> Run() {
    double now = 0;
    while (true) {
      // Let every free stage act at `now` until none can; zero-cost work
      // lets a stage act several times at one instant.
      bool acted = true;
      while (acted) {
        acted = false;
        for (int s = 0; s < o_.num_stages; ++s) {
          if (stages_[s].free_at > now || stages_[s].done) continue;
          absl::StatusOr<bool> started = Act(s, now);
          if (!started.ok()) return started.status();
          acted |= *started;
        }
      }
      const double next = NextEvent(now);
      if (next == kNever) break;
      for (SimStage& st : stages_) st.in_flight_seconds += st.scheduler.in_flight() * (next - now);
      now = next;
    }
    const bool queues_empty = std::all_of(stages_.begin(), stages_.end(), [](const SimStage& st) {
      return st.activations.empty() && st.gradients.empty();
    });
    if (!stages_[0].done || !queues_empty) {
      return absl::InternalError(absl::StrCat("the simulated pipeline deadlocked at t=", now,
                                              "s, step ", stages_[0].scheduler.version()));
    }
    return Result(now);
  }

 private:
  const StageCosts& Costs(int s) const { return o_.costs.size() == 1 ? o_.costs[0] : o_.costs[s]; }
  bool last(int s) const { return s == o_.num_stages - 1; }

  // The earliest time after `now` at which something changes: a task ends or
  // a queued tensor arrives. kNever when nothing is pending.
  double NextEvent(double now) const {
    double next = kNever;
    for (const SimStage& st : stages_) {
      if (st.free_at > now) next = std::min(next, st.free_at);
      for (const auto* queue : {&st.activations, &st.gradients}) {
        if (!queue->empty() && queue->front().arrival > now) {
          next = std::min(next, queue->front().arrival);
        }
      }
    }
    return next;
  }

  void Busy(SimStage& st, double now, double seconds) {
    st.free_at = now + seconds;
    st.busy += seconds;
  }

  void SendForward(int s, double at, uint64_t id, bool eval) {
    if (!last(s)) stages_[s + 1].activations.push_back({at + o_.link_latency, id, eval});
  }

  // One action of stage s at `now`, if any can run; false when it must wait.
  absl::StatusOr<bool> Act(int s, double now) {
    SimStage& st = stages_[s];
    const StageCosts& cost = Costs(s);
    const bool activation_here = !st.activations.empty() && st.activations.front().arrival <= now;
    // Control frames first, as StageRuntime::Loop handles them.
    if (activation_here && st.activations.front().eval) {
      const uint64_t id = st.activations.front().micro_batch_id;
      st.activations.pop_front();
      Busy(st, now, cost.eval_forward);
      SendForward(s, st.free_at, id, /*eval=*/true);
      return true;
    }
    if (st.eval_left > 0) {  // stage 0 at a drained point with validation due
      Busy(st, now, cost.eval_forward);
      SendForward(s, st.free_at, o_.eval_micro_batches - st.eval_left, /*eval=*/true);
      if (--st.eval_left == 0) st.scheduler.OnDrainHandled();
      return true;
    }
    const bool gradient_here = !st.gradients.empty() && st.gradients.front().arrival <= now;
    switch (st.scheduler.Next(gradient_here, activation_here)) {
      case StageAction::kBackward: {
        uint64_t id = st.scheduler.oldest_in_flight();
        if (!last(s)) {
          id = st.gradients.front().micro_batch_id;
          st.gradients.pop_front();
        }
        absl::StatusOr<BackwardResult> r = st.scheduler.OnBackward(id);
        if (!r.ok()) return absl::InternalError(r.status().message());
        StageSimulation& res = st.result;
        if (static_cast<int64_t>(res.drift_histogram.size()) <= r->drift) {
          res.drift_histogram.resize(r->drift + 1, 0);
        }
        ++res.drift_histogram[r->drift];
        res.drift_max = std::max(res.drift_max, r->drift);
        ++res.backwards;
        if (s > 0) stages_[s - 1].gradients.push_back({now + cost.backward + o_.link_latency, id, false});
        Busy(st, now, cost.backward + (r->step_now ? cost.optimizer_step : 0));
        if (r->step_now) ++res.optimizer_steps;
        return true;
      }
      case StageAction::kForward: {
        uint64_t id;
        if (s == 0) {
          id = st.scheduler.next_micro_batch();
        } else {
          id = st.activations.front().micro_batch_id;
          st.activations.pop_front();
        }
        if (absl::Status status = st.scheduler.OnForward(id); !status.ok()) {
          return absl::InternalError(status.message());
        }
        st.result.max_in_flight = std::max(st.result.max_in_flight, st.scheduler.in_flight());
        ++st.result.forwards;
        Busy(st, now, cost.forward);
        SendForward(s, st.free_at, id, /*eval=*/false);
        return true;
      }
      case StageAction::kDrained:
        if (st.scheduler.drain_work().evaluate) {
          st.eval_left = o_.eval_micro_batches;
        } else {
          st.scheduler.OnDrainHandled();
        }
        return true;
      case StageAction::kDone:
        st.done = true;
        return false;
      case StageAction::kWait:
        return false;
    }
    return false;
  }

  PipelineSimulation Result(double seconds) {
    PipelineSimulation sim;
    sim.seconds = seconds;
    if (seconds > 0) {
      sim.micro_batches_per_second =
          static_cast<double>(o_.steps) * stages_[0].scheduler.accumulation() / seconds;
    }
    for (SimStage& st : stages_) {
      StageSimulation r = st.result;
      r.busy_seconds = st.busy;
      r.idle_seconds = std::max(seconds - st.busy, 0.0);
      r.utilization = seconds > 0 ? st.busy / seconds : 0;
      r.idle_fraction = seconds > 0 ? r.idle_seconds / seconds : 0;
      r.mean_in_flight = seconds > 0 ? st.in_flight_seconds / seconds : 0;
      int64_t sum = 0;
      for (size_t d = 0; d < r.drift_histogram.size(); ++d) sum += d * r.drift_histogram[d];
      r.drift_mean = r.backwards > 0 ? static_cast<double>(sum) / r.backwards : 0;
      sim.stages.push_back(std::move(r));
    }
    return sim;
  }

  const PipelineSimulatorOptions& o_;
  std::vector<SimStage> stages_;
};

}  // namespace

absl::StatusOr<PipelineSimulation> SimulatePipeline(const PipelineSimulatorOptions& options) {
  if (absl::Status status = CheckOptions(options); !status.ok()) return status;
  return Simulation(options).Run();
}

}  // namespace paci
