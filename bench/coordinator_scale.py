"""The scale study of bench/coordinator_throughput.py: the coordinator holding
up to --scale_jobs jobs (reads, ListJobs pages and WatchJob while it grows),
retention removing finished jobs, and the table and plot of both."""
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

from bench_results import percentile, write_result


class Coordinator:
    """A paci_coordinator on a given SQLite file; start() times it until it serves."""

    def __init__(self, build, db, extra=()):
        self.build, self.db, self.extra = build, db, list(extra)
        self.proc = None

    def start(self):
        start = time.perf_counter()
        self.proc = subprocess.Popen(
            [os.path.join(self.build, "server", "paci_coordinator"), "--listen=127.0.0.1:0",
             "--db=" + self.db, "--max_jobs=1000000"] + self.extra,
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.log = []
        port = []  # from its "serving on HOST:PORT" line
        served = threading.Event()  # it logged that it serves, or its output ended

        def read():
            for line in iter(self.proc.stdout.readline, ""):
                self.log.append(line)
                m = re.search(r"coordinator serving on \S+:(\d+) \(", line)
                if m:
                    port.append(m.group(1))
                    served.set()
            served.set()
        threading.Thread(target=read, daemon=True).start()
        if not served.wait(timeout=60) or not port:
            raise RuntimeError("coordinator did not start:\n" + "".join(self.log))
        self.started_seconds = time.perf_counter() - start
        self.address = "127.0.0.1:" + port[0]
        return self

    def rss_mb(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            kb = int(re.search(r"VmRSS:\s+(\d+) kB", f.read()).group(1))
        return round(kb / 1024, 1)

    def kill(self):
        self.proc.kill()  # SIGKILL: no clean shutdown
        self.proc.wait(timeout=20)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=20)


class Submitter:
    """Submissions from `clients` clients; job names are numbered on from the last call's."""

    def __init__(self, grpc, cpb, cgrpc, spec, clients):
        self.grpc, self.cpb, self.cgrpc, self.spec = grpc, cpb, cgrpc, spec
        self.clients = clients
        self.counter = 0
        self.lock = threading.Lock()

    def submit_many(self, address, count, prefix, cancel=False):
        """count submissions (each then cancelled when `cancel`); returns them per second."""
        cpb = self.cpb
        target = self.counter + count

        def client():
            own = self.cgrpc.CoordinatorStub(self.grpc.insecure_channel(address))
            while True:
                with self.lock:
                    if self.counter >= target:
                        return
                    i = self.counter
                    self.counter += 1
                name = "%s-%d" % (prefix, i)
                own.SubmitJob(cpb.SubmitJobRequest(spec=self.spec(name, P=2)), timeout=60)
                if cancel:
                    own.CancelJob(cpb.CancelJobRequest(name=name), timeout=60)

        threads = [threading.Thread(target=client) for _ in range(self.clients)]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return count / (time.perf_counter() - start)


def latencies(call, n):
    """(p50, p99) in ms of n calls of call()."""
    values = []
    for _ in range(n):
        start = time.perf_counter()
        call()
        values.append(time.perf_counter() - start)
    return (round(1000 * percentile(values, 50), 2), round(1000 * percentile(values, 99), 2))


def read_latencies(stub, cpb, held):
    """ListJobs (first page, a page by token half-way, phase=QUEUED) and GetJob latencies."""
    first_page = latencies(lambda: stub.ListJobs(cpb.ListJobsRequest(page_size=100)), 50)
    middle = stub.ListJobs(cpb.ListJobsRequest(page_size=held // 2 if held // 2 <= 1000 else 1000))
    token = middle.next_page_token
    for _ in range(max(0, (held // 2) // 1000 - 1)):
        token = stub.ListJobs(cpb.ListJobsRequest(page_size=1000, page_token=token)).next_page_token
    deep_page = latencies(
        lambda: stub.ListJobs(cpb.ListJobsRequest(page_size=100, page_token=token)), 50)
    queued_page = latencies(
        lambda: stub.ListJobs(cpb.ListJobsRequest(page_size=100, phase=cpb.QUEUED)), 50)
    get = latencies(lambda: stub.GetJob(cpb.GetJobRequest(name="job-%d" % (held // 2))), 200)
    return first_page, deep_page, queued_page, get, watch_latencies(stub, cpb, held)


def watch_latencies(stub, cpb, held, n=50):
    """(p50, p99) in ms from a change to a watcher seeing it: a WatchJob on a queued job, then
    CancelJob of it, until the stream brings phase CANCELLED (n jobs, each cancelled once)."""
    values = []
    for i in range(n):
        stream = stub.WatchJob(cpb.WatchJobRequest(name="job-%d" % (held // 4 + i)), timeout=30)
        first = next(stream)
        assert first.status.phase == cpb.QUEUED, first.status
        start = time.perf_counter()
        stub.CancelJob(cpb.CancelJobRequest(name=first.name))
        for update in stream:
            if update.status.phase == cpb.CANCELLED:
                values.append(time.perf_counter() - start)
                break
        stream.cancel()
    return (round(1000 * percentile(values, 50), 2), round(1000 * percentile(values, 99), 2))


def growth_study(args, grpc, cpb, cgrpc, submitter, tmpdir):
    """The store filled to each checkpoint with queued jobs: (empty-store rate, rows)."""
    checkpoints = [c for c in (1000, 10000, 50000, 100000) if c <= args.scale_jobs]
    if args.scale_jobs not in checkpoints:
        checkpoints.append(args.scale_jobs)
    window = 2000  # submissions timed at each checkpoint
    db = os.path.join(tmpdir, "scale.db")
    coordinator = Coordinator(args.build, db).start()
    stub = cgrpc.CoordinatorStub(grpc.insecure_channel(coordinator.address))
    rows = []
    held = 0
    # A warm-up (connections, threads), then the empty-store rate: the first window.
    submitter.submit_many(coordinator.address, 500, "job")
    print("scale: submissions/s with an empty store ...", file=sys.stderr)
    empty_rate = submitter.submit_many(coordinator.address, window, "job")
    held += 500 + window
    for checkpoint in checkpoints:
        if held < checkpoint:
            print("scale: filling to %d jobs ..." % checkpoint, file=sys.stderr)
            submitter.submit_many(coordinator.address, checkpoint - held, "job")
            held = checkpoint
        first_page, deep_page, queued_page, get, watch = read_latencies(stub, cpb, held)
        rss = coordinator.rss_mb()
        print("scale: %d held: submissions/s ..." % held, file=sys.stderr)
        rate = submitter.submit_many(coordinator.address, window, "job")
        row = dict(jobs_held=held, submissions_per_second=round(rate, 1),
                   vs_empty=round(rate / empty_rate, 2),
                   list_first_page_ms_p50=first_page[0], list_first_page_ms_p99=first_page[1],
                   list_middle_page_ms_p50=deep_page[0], list_middle_page_ms_p99=deep_page[1],
                   list_queued_page_ms_p50=queued_page[0], list_queued_page_ms_p99=queued_page[1],
                   get_ms_p50=get[0], get_ms_p99=get[1], watch_ms_p50=watch[0], watch_ms_p99=watch[1],
                   rss_mb=rss)
        held += window
        if checkpoint in (10000, 100000) or checkpoint == checkpoints[-1]:
            coordinator.kill()
            coordinator = Coordinator(args.build, db).start()
            stub = cgrpc.CoordinatorStub(grpc.insecure_channel(coordinator.address))
            row["restart_seconds"] = round(coordinator.started_seconds, 3)
            row["rss_mb_after_restart"] = coordinator.rss_mb()
        rows.append(row)
        print(row, file=sys.stderr)
    coordinator.stop()
    return empty_rate, rows


def retention_study(args, submitter, tmpdir):
    """Retention: the store stays at its limit however many jobs finished."""
    keep = 10000
    db = os.path.join(tmpdir, "retention.db")
    coordinator = Coordinator(args.build, db, ["--finished_jobs_to_keep=%d" % keep]).start()
    submitter.counter = 0
    finished = 0
    retention_rows = []
    for checkpoint in [c for c in (10000, 50000, 100000) if c <= max(args.scale_jobs, 10000)]:
        print("retention: %d jobs finished ..." % checkpoint, file=sys.stderr)
        rate = submitter.submit_many(coordinator.address, checkpoint - finished, "done",
                                     cancel=True)
        finished = checkpoint
        rss = coordinator.rss_mb()
        coordinator.kill()
        coordinator = Coordinator(args.build, db, ["--finished_jobs_to_keep=%d" % keep]).start()
        retention_rows.append(dict(jobs_finished=finished, jobs_kept=keep,
                                   submit_and_cancel_per_second=round(rate, 1), rss_mb=rss,
                                   restart_seconds=round(coordinator.started_seconds, 3),
                                   db_mb=round(os.path.getsize(db) / 2**20, 1)))
        print(retention_rows[-1], file=sys.stderr)
    coordinator.stop()
    return retention_rows


def scale_study(args, grpc, cpb, cgrpc, spec):
    """The growth and retention studies; writes coordinator_scale.{json,md,png}."""
    tmp = tempfile.TemporaryDirectory()
    submitter = Submitter(grpc, cpb, cgrpc, spec, args.clients)
    empty_rate, rows = growth_study(args, grpc, cpb, cgrpc, submitter, tmp.name)
    retention_rows = retention_study(args, submitter, tmp.name)

    result = dict(clients=args.clients, empty_store_submissions_per_second=round(empty_rate, 1),
                  growth=rows, retention=retention_rows)
    table = scale_table(empty_rate, rows, retention_rows)
    print(table)
    write_result(args.out, "coordinator_scale", result, table)
    plot_scale(result, os.path.join(args.out, "coordinator_scale.png"), tmp.name)


def scale_table(empty_rate, rows, retention_rows):
    """coordinator_scale.md: the growth rows, then the retention rows."""
    lines = [
        "| jobs held | submissions/s | vs empty | ListJobs first page p50/p99 ms | "
        "ListJobs page by token, half-way p50/p99 ms | ListJobs phase=QUEUED p50/p99 ms | "
        "GetJob p50/p99 ms | WatchJob, change to update p50/p99 ms | RSS MB | restart after SIGKILL s |",
        "|---|---|---|---|---|---|---|---|---|---|",
        "| 500 (empty, after a warm-up) | %.0f | 1.00 | | | | | | | |" % empty_rate]
    for r in rows:
        lines.append("| %d | %.0f | %.2f | %.2f / %.2f | %.2f / %.2f | %.2f / %.2f | %.2f / %.2f | %.2f / %.2f | "
                     "%.0f | %s |" % (
            r["jobs_held"], r["submissions_per_second"], r["vs_empty"],
            r["list_first_page_ms_p50"], r["list_first_page_ms_p99"],
            r["list_middle_page_ms_p50"], r["list_middle_page_ms_p99"],
            r["list_queued_page_ms_p50"], r["list_queued_page_ms_p99"],
            r["get_ms_p50"], r["get_ms_p99"], r["watch_ms_p50"], r["watch_ms_p99"], r["rss_mb"],
            r.get("restart_seconds", "")))
    lines += ["", "| jobs finished in all | finished jobs kept | submit+cancel/s | RSS MB | "
              "restart after SIGKILL s | store MB |", "|---|---|---|---|---|---|"]
    for r in retention_rows:
        lines.append("| %d | %d | %.0f | %.0f | %.3f | %.1f |" % (
            r["jobs_finished"], r["jobs_kept"], r["submit_and_cancel_per_second"], r["rss_mb"],
            r["restart_seconds"], r["db_mb"]))
    return "\n".join(lines)


def plot_scale(result, png, tmpdir):
    """Submissions/s and ListJobs/GetJob p50 against jobs held, when gnuplot is installed."""
    if not shutil.which("gnuplot"):
        print("no gnuplot: skipping the plot", file=sys.stderr)
        return
    data = os.path.join(tmpdir, "scale.dat")
    with open(data, "w") as f:
        f.write("500 %f 0 0 0\n" % result["empty_store_submissions_per_second"])
        for r in result["growth"]:
            f.write("%d %f %f %f %f\n" % (r["jobs_held"], r["submissions_per_second"],
                                          r["list_first_page_ms_p50"], r["list_middle_page_ms_p50"],
                                          r["get_ms_p50"]))
    script = """
set terminal pngcairo size 1000,420 font ',10'
set output '%s'
set multiplot layout 1,2
set logscale x
set xlabel 'jobs held'
set key bottom left
set title 'SubmitJob, %d clients'
set ylabel 'submissions/s'
set yrange [0:*]
plot '%s' using 1:2 with linespoints title 'submissions/s'
set title 'read latency (p50)'
set ylabel 'ms'
plot '%s' every ::1 using 1:3 with linespoints title 'ListJobs first page', \\
     '' every ::1 using 1:4 with linespoints title 'ListJobs page by token', \\
     '' every ::1 using 1:5 with linespoints title 'GetJob'
unset multiplot
""" % (png, result["clients"], data, data)
    subprocess.run(["gnuplot"], input=script, text=True, check=True)
