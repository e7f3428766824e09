#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace paci {

// A registered worker as the scheduler sees it.
struct WorkerSlot {
  std::string worker_id;
  std::map<std::string, std::string> labels;
  bool idle = true;  // registered, alive and running no stage
};

// The first key of `selector` that `labels` lacks or holds with another value;
// nullptr when every label the selector asks for is there (the worker
// matches). What the scheduler, the queue and a worker's claim at
// registration all match by.
const std::string* UnmatchedLabel(const std::map<std::string, std::string>& labels,
                                  const std::map<std::string, std::string>& selector);

// A job waiting for workers.
struct PendingJob {
  std::string name;
  int priority = 0;       // higher runs first
  int64_t sequence = 0;   // submission order; FIFO within a priority
  int num_workers = 1;    // P x R: the job needs all of them at once
  std::map<std::string, std::string> selector;  // every worker must carry these labels
};

struct Placement {
  std::string job_name;
  std::vector<std::string> worker_ids;  // worker_ids[s] runs stage s
};

struct SchedulingDecision {
  std::vector<Placement> placements;
  // Jobs that no set of registered workers could ever run: fewer workers match the selector than
  // num_workers (or num_workers < 1), in queue order.
  std::vector<std::string> unschedulable;
  // Jobs that fit the pool but not the idle workers now, in queue order.
  std::vector<std::string> waiting;
};

// Gang scheduling as a pure function: no clock, no I/O, deterministic. It is
// the rule; the coordinator applies it incrementally through JobQueue
// (server/job_queue.h), whose tests check its placements against this function.
//
// Orders jobs by priority (higher first), then sequence (FIFO), then name. Walks the queue: a job
// whose selector matches at least num_workers idle workers gets them all at once (gang: all stages
// or none). The first job that fits the pool but not the idle workers stops the walk (strict FIFO
// within the order: no later job jumps it); it and all later schedulable jobs are waiting.
// Unschedulable jobs are skipped and never block. Workers are taken in the order given (the
// caller passes them in registration order); a worker id listed twice counts once, at its first
// entry, so no worker is ever placed twice.
SchedulingDecision ScheduleJobs(std::vector<PendingJob> queue, const std::vector<WorkerSlot>& workers);

}  // namespace paci
