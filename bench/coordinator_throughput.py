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
Writes bench/results/coordinator_throughput.{json,md}.

  /usr/bin/python3 bench/coordinator_throughput.py [--clients 16] [--jobs 400]
"""
import argparse
import json
import os
import queue
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def percentile(values, p):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(p / 100 * (len(values) - 1))))]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--jobs", type=int, default=400, help="submissions per phase")
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    args = parser.parse_args()
    sys.path.insert(0, os.path.join(args.build, "python"))
    import grpc
    from paci.v1 import coordinator_pb2 as cpb, coordinator_pb2_grpc as cgrpc, job_pb2

    def spec(name, P=1):
        s = job_pb2.JobSpec(name=name)
        s.model.vocab_size, s.model.num_layers, s.model.d_model = 80, 2, 32
        s.model.num_heads, s.model.seq_len = 4, 16
        s.pipeline.num_stages, s.pipeline.accumulation, s.pipeline.micro_batch_size = P, 1, 1
        s.optimizer.lr = 1e-3
        s.training.steps = 1
        s.data.corpus_path = "/unused"
        return s

    tmp = tempfile.TemporaryDirectory()
    port_file = os.path.join(tmp.name, "port")
    coordinator = subprocess.Popen(
        [os.path.join(args.build, "server", "paci_coordinator"), "--listen=127.0.0.1:0",
         "--db=" + os.path.join(tmp.name, "bench.db"), "--port_file=" + port_file],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log = []
    threading.Thread(target=lambda: log.extend(iter(coordinator.stdout.readline, "")),
                     daemon=True).start()
    while not os.path.exists(port_file):
        time.sleep(0.05)  # polling interval
    address = "127.0.0.1:" + open(port_file).read().strip()
    channel = grpc.insecure_channel(address)
    stub = cgrpc.CoordinatorStub(channel)

    def submit_phase(prefix, clients, jobs):
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

    print("submissions: 1 client ...", file=sys.stderr)
    single, _ = submit_phase("one", 1, args.jobs // 4)
    print("submissions: %d clients ..." % args.clients, file=sys.stderr)
    many, _ = submit_phase("many", args.clients, args.jobs)

    # Scheduling: workers that finish each stage at once.
    assigned_at = {}
    stop = threading.Event()

    def worker(worker_id):
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

    # The jobs submitted so far are drained first; then a measured batch.
    workers = [threading.Thread(target=worker, args=("bench-w%d" % i,), daemon=True)
               for i in range(args.workers)]
    for w in workers:
        w.start()
    deadline = time.time() + 300
    while time.time() < deadline:
        queued = stub.ListJobs(cpb.ListJobsRequest(phase=cpb.QUEUED)).jobs
        running = stub.ListJobs(cpb.ListJobsRequest(phase=cpb.RUNNING)).jobs
        if not queued and not running:
            break
        time.sleep(0.2)  # polling interval
    print("scheduling: %d clients, %d workers ..." % (args.clients, args.workers), file=sys.stderr)
    sched, submitted_at = submit_phase("sched", args.clients, args.jobs)
    while time.time() < deadline and len([n for n in submitted_at if n in assigned_at]) < len(submitted_at):
        time.sleep(0.1)  # polling interval
    delays = [assigned_at[n] - submitted_at[n] for n in submitted_at if n in assigned_at]
    # Submission can return after the assignment arrives: count those as 0.
    delays = [max(0.0, d) for d in delays]
    # One at a time on an idle pool: the placement path alone, no queueing.
    idle_delays = []
    for i in range(50):
        name = "idle-%d" % i
        start = time.perf_counter()
        stub.SubmitJob(cpb.SubmitJobRequest(spec=spec(name)))
        while name not in assigned_at and time.perf_counter() - start < 10:
            time.sleep(0.0005)  # polling interval
        idle_delays.append(assigned_at.get(name, time.perf_counter()) - start)
    metrics_url = re.search(r"metrics=(http://\S+)", "".join(log)).group(1)
    text = urllib.request.urlopen(metrics_url, timeout=5).read().decode()
    hist_sum = float(re.search(r"^paci_coordinator_scheduling_latency_seconds_sum (\S+)", text, re.M).group(1))
    hist_count = float(re.search(r"^paci_coordinator_scheduling_latency_seconds_count (\S+)", text, re.M).group(1))
    stop.set()
    scheduling = dict(workers=args.workers, jobs=len(delays),
                      jobs_per_second=sched["submissions_per_second"],
                      submit_to_assignment_ms_p50=round(1000 * percentile(delays, 50), 2),
                      submit_to_assignment_ms_p99=round(1000 * percentile(delays, 99), 2),
                      coordinator_queued_to_placed_ms_mean=round(1000 * hist_sum / hist_count, 2),
                      idle_pool_submit_to_assignment_ms_p50=round(1000 * percentile(idle_delays, 50), 2),
                      idle_pool_submit_to_assignment_ms_p99=round(1000 * percentile(idle_delays, 99), 2))
    coordinator.terminate()
    coordinator.wait(timeout=20)

    result = dict(single_client=single, concurrent_clients=many, scheduling=scheduling,
                  concurrency_ratio=round(many["submissions_per_second"] /
                                          single["submissions_per_second"], 2))
    table = "\n".join([
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
    print(table)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "coordinator_throughput.json"), "w") as f:
        json.dump(result, f, indent=2)
    with open(os.path.join(args.out, "coordinator_throughput.md"), "w") as f:
        f.write(table + "\n")


if __name__ == "__main__":
    main()
