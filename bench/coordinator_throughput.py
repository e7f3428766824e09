#!/usr/bin/python3
"""Coordinator throughput: submissions per second and scheduling latency.

Starts a real coordinator (its own SQLite file, every submission durable) on
127.0.0.1 and measures, in one run:
  1. SubmitJob throughput from 1 client (the baseline) and from N concurrent
     clients, with latency percentiles, as a ratio to the baseline;
  2. scheduling latency: W workers speaking the real WorkerGateway protocol
     finish every stage they are given at once, so jobs flow through the gang
     scheduler; latency is from SubmitJob's return to the worker receiving its
     assignment, and the coordinator's own histogram is read from /metrics.
  3. scale (--scale_jobs, default 100,000; 0 skips it): a fresh coordinator and
     no workers, so every job stays queued; N clients submit until the store
     holds --scale_jobs jobs. At each checkpoint (1,000, 10,000, 50,000,
     100,000 held) it measures submissions/s over the next window of
     submissions, ListJobs latency (first page, and a page reached by token
     half-way through) and GetJob latency, and the coordinator's resident
     memory; at 10,000 and 100,000 it SIGKILLs the coordinator and times the
     restart (spawn until it serves). Then the retention study: a coordinator
     keeping --finished_jobs_to_keep=10000 finished jobs; clients submit and
     cancel jobs, and memory and restart time are taken when 10,000, 50,000
     and 100,000 jobs have finished in all.
Writes bench/results/coordinator_throughput.{json,md} and, for the scale study,
coordinator_scale.{json,md} and coordinator_scale.png (with gnuplot).

  /usr/bin/python3 bench/coordinator_throughput.py [--clients 16] [--jobs 400]
      [--scale_jobs 100000] [--only_scale]
"""
import argparse
import os
import queue
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

from _paths import ROOT, use_build
from bench_results import percentile, write_result
from coordinator_scale import scale_study


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--jobs", type=int, default=400, help="submissions per phase")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    parser.add_argument("--scale_jobs", type=int, default=100000,
                        help="the scale study's largest store (0: skip the study)")
    parser.add_argument("--only_scale", action="store_true", help="run the scale study alone")
    return parser.parse_args()


def spec_maker(job_pb2):
    """spec(name, P=1): the smallest JobSpec the coordinator accepts, with P stages."""
    def spec(name, P=1):
        s = job_pb2.JobSpec(name=name)
        s.model.vocab_size, s.model.num_layers, s.model.d_model = 80, 2, 32
        s.model.num_heads, s.model.seq_len = 4, 16
        s.pipeline.num_stages, s.pipeline.accumulation, s.pipeline.micro_batch_size = P, 1, 1
        s.optimizer.lr = 1e-3
        s.training.steps = 1
        s.data.corpus_path = "/unused"
        return s
    return spec


def main():
    args = parse_args()
    use_build(args.build)
    import grpc
    from paci.v1 import coordinator_pb2 as cpb, coordinator_pb2_grpc as cgrpc, job_pb2
    spec = spec_maker(job_pb2)

    if args.only_scale:
        scale_study(args, grpc, cpb, cgrpc, spec)
        return
    throughput_study(args, grpc, cpb, cgrpc, spec)
    if args.scale_jobs > 0:
        scale_study(args, grpc, cpb, cgrpc, spec)


def start_throughput_coordinator(args, tmpdir):
    """A coordinator on its own SQLite file in tmpdir: (process, its output lines, address)."""
    port_file = os.path.join(tmpdir, "port")
    coordinator = subprocess.Popen(
        [os.path.join(args.build, "server", "paci_coordinator"), "--listen=127.0.0.1:0",
         "--db=" + os.path.join(tmpdir, "bench.db"), "--port_file=" + port_file],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log = []
    threading.Thread(target=lambda: log.extend(iter(coordinator.stdout.readline, "")),
                     daemon=True).start()
    while not os.path.exists(port_file):
        time.sleep(0.05)  # polling interval
    address = "127.0.0.1:" + open(port_file).read().strip()
    return coordinator, log, address


def submit_phase(grpc, cpb, cgrpc, spec, address, prefix, clients, jobs):
    """jobs submissions from `clients` clients: (throughput and latency, name -> return time)."""
    names = queue.Queue()
    for i in range(jobs):
        names.put("%s-%d" % (prefix, i))
    latencies, submitted_at = [], {}
    lock = threading.Lock()

    def client():
        own = cgrpc.CoordinatorStub(grpc.insecure_channel(address))
        while True:
            try:
                name = names.get_nowait()
            except queue.Empty:
                return
            start = time.perf_counter()
            own.SubmitJob(cpb.SubmitJobRequest(spec=spec(name)))
            end = time.perf_counter()
            with lock:
                latencies.append(end - start)
                submitted_at[name] = end

    threads = [threading.Thread(target=client) for _ in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - start
    return dict(clients=clients, jobs=jobs, seconds=round(elapsed, 3),
                submissions_per_second=round(jobs / elapsed, 1),
                latency_ms_p50=round(1000 * percentile(latencies, 50), 2),
                latency_ms_p99=round(1000 * percentile(latencies, 99), 2)), submitted_at


def run_worker(cpb, cgrpc, channel, worker_id, assigned_at, stop):
    """A worker that finishes each stage at once; records when each job was first assigned."""
    gateway = cgrpc.WorkerGatewayStub(channel)
    outbox = queue.Queue()
    outbox.put(cpb.WorkerMessage(register=cpb.WorkerRegistration(
        worker_id=worker_id, link_address="127.0.0.1:1", capacity=1)))

    def requests():
        while not stop.is_set():
            try:
                yield outbox.get(timeout=0.5)
            except queue.Empty:
                yield cpb.WorkerMessage(heartbeat=cpb.Heartbeat())

    for message in gateway.Connect(requests()):
        if message.HasField("assign"):
            a = message.assign
            assigned_at.setdefault(a.job_name, time.perf_counter())
            from paci.v1 import stage_pb2
            outbox.put(cpb.WorkerMessage(report=stage_pb2.StageReport(
                job_name=a.job_name, stage=a.stage, attempt=a.attempt,
                optimizer_steps=1, finished=True)))
        if stop.is_set():
            return


def drain(stub, cpb, deadline):
    """Waits (until deadline) for no job to be queued or running."""
    while time.time() < deadline:
        queued = stub.ListJobs(cpb.ListJobsRequest(phase=cpb.QUEUED)).jobs
        running = stub.ListJobs(cpb.ListJobsRequest(phase=cpb.RUNNING)).jobs
        if not queued and not running:
            break
        time.sleep(0.2)  # polling interval


def idle_pool_delays(stub, cpb, spec, assigned_at):
    """One at a time on an idle pool: the placement path alone, no queueing."""
    idle_delays = []
    for i in range(50):
        name = "idle-%d" % i
        start = time.perf_counter()
        stub.SubmitJob(cpb.SubmitJobRequest(spec=spec(name)))
        while name not in assigned_at and time.perf_counter() - start < 10:
            time.sleep(0.0005)  # polling interval
        idle_delays.append(assigned_at.get(name, time.perf_counter()) - start)
    return idle_delays


def scheduling_histogram(log):
    """(sum, count) of the coordinator's scheduling-latency histogram, from its /metrics."""
    metrics_url = re.search(r"metrics=(http://\S+)", "".join(log)).group(1)
    text = urllib.request.urlopen(metrics_url, timeout=5).read().decode()
    hist_sum = float(re.search(r"^paci_coordinator_scheduling_latency_seconds_sum (\S+)", text, re.M).group(1))
    hist_count = float(re.search(r"^paci_coordinator_scheduling_latency_seconds_count (\S+)", text, re.M).group(1))
    return hist_sum, hist_count


def scheduling_phase(args, grpc, cpb, cgrpc, spec, address, channel, stub, log):
    """Scheduling: workers that finish each stage at once. The jobs submitted so
    far are drained first; then a measured batch, then one job at a time."""
    assigned_at = {}
    stop = threading.Event()
    workers = [threading.Thread(target=run_worker,
                                args=(cpb, cgrpc, channel, "bench-w%d" % i, assigned_at, stop),
                                daemon=True)
               for i in range(args.workers)]
    for w in workers:
        w.start()
    deadline = time.time() + 300
    drain(stub, cpb, deadline)
    print("scheduling: %d clients, %d workers ..." % (args.clients, args.workers), file=sys.stderr)
    sched, submitted_at = submit_phase(grpc, cpb, cgrpc, spec, address, "sched", args.clients,
                                       args.jobs)
    while time.time() < deadline and len([n for n in submitted_at if n in assigned_at]) < len(submitted_at):
        time.sleep(0.1)  # polling interval
    delays = [assigned_at[n] - submitted_at[n] for n in submitted_at if n in assigned_at]
    # Submission can return after the assignment arrives: count those as 0.
    delays = [max(0.0, d) for d in delays]
    idle_delays = idle_pool_delays(stub, cpb, spec, assigned_at)
    hist_sum, hist_count = scheduling_histogram(log)
    stop.set()
    return dict(workers=args.workers, jobs=len(delays),
                jobs_per_second=sched["submissions_per_second"],
                submit_to_assignment_ms_p50=round(1000 * percentile(delays, 50), 2),
                submit_to_assignment_ms_p99=round(1000 * percentile(delays, 99), 2),
                coordinator_queued_to_placed_ms_mean=round(1000 * hist_sum / hist_count, 2),
                idle_pool_submit_to_assignment_ms_p50=round(1000 * percentile(idle_delays, 50), 2),
                idle_pool_submit_to_assignment_ms_p99=round(1000 * percentile(idle_delays, 99), 2))


def throughput_study(args, grpc, cpb, cgrpc, spec):
    """Submissions from 1 and from N clients, then scheduling latency; writes
    coordinator_throughput.{json,md}."""
    tmp = tempfile.TemporaryDirectory()
    coordinator, log, address = start_throughput_coordinator(args, tmp.name)
    channel = grpc.insecure_channel(address)
    stub = cgrpc.CoordinatorStub(channel)
    print("submissions: 1 client ...", file=sys.stderr)
    single, _ = submit_phase(grpc, cpb, cgrpc, spec, address, "one", 1, args.jobs // 4)
    print("submissions: %d clients ..." % args.clients, file=sys.stderr)
    many, _ = submit_phase(grpc, cpb, cgrpc, spec, address, "many", args.clients, args.jobs)
    scheduling = scheduling_phase(args, grpc, cpb, cgrpc, spec, address, channel, stub, log)
    coordinator.terminate()
    coordinator.wait(timeout=20)

    result = dict(single_client=single, concurrent_clients=many, scheduling=scheduling,
                  concurrency_ratio=round(many["submissions_per_second"] /
                                          single["submissions_per_second"], 2))
    table = throughput_table(args, result)
    print(table)
    write_result(args.out, "coordinator_throughput", result, table)


def throughput_table(args, result):
    """coordinator_throughput.md: submissions, then scheduling latency."""
    single, many = result["single_client"], result["concurrent_clients"]
    scheduling = result["scheduling"]
    return "\n".join([
        "| measurement | clients | submissions/s | p50 ms | p99 ms | vs 1 client |",
        "|---|---|---|---|---|---|",
        "| SubmitJob, durable (baseline) | 1 | %.0f | %.2f | %.2f | 1.00x |" % (
            single["submissions_per_second"], single["latency_ms_p50"], single["latency_ms_p99"]),
        "| SubmitJob, durable | %d | %.0f | %.2f | %.2f | %.2fx |" % (
            args.clients, many["submissions_per_second"], many["latency_ms_p50"],
            many["latency_ms_p99"], result["concurrency_ratio"]),
        "",
        "| scheduling (%d workers finishing each stage at once) | p50 ms | p99 ms |" % args.workers,
        "|---|---|---|",
        "| burst of %d jobs from %d clients: submit returned -> worker assigned (queueing included) | %.2f | %.2f |" % (
            args.jobs, args.clients, scheduling["submit_to_assignment_ms_p50"],
            scheduling["submit_to_assignment_ms_p99"]),
        "| one job at a time on an idle pool: submit sent -> worker assigned | %.2f | %.2f |" % (
            scheduling["idle_pool_submit_to_assignment_ms_p50"],
            scheduling["idle_pool_submit_to_assignment_ms_p99"]),
    ])


if __name__ == "__main__":
    main()
