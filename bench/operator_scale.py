#!/usr/bin/python3
"""The operator holding many TrainingJobs: reconcile latency, API load, memory,
and how long a new leader takes to catch up.

Starts the local cluster of tests/harness/local_cluster.py (the real control plane, a
real coordinator, two operator replicas electing a leader; pods as processes,
though none is made: the jobs are suspended, so each reconcile reads, decides
and writes status with no pod and no training) and, in one run:
  1. applies --jobs suspended TrainingJobs with kubectl in batches of 100, until
     every one shows phase Suspended: the reconcile latency p50/p99 of that
     phase from the leader's own histogram (paci_operator_reconcile_duration_seconds),
     its API requests per second (paci_operator_kube_requests_total), and the
     CPU kube-apiserver and the leader used meanwhile (a share near 1.0
     of a core means that process was the bottleneck);
  2. holds them for --steady_seconds: requests per second and each replica's
     resident memory at the start and the end (growth there would be a leak);
  3. SIGKILLs the leader: seconds until the standby leads, until it has
     reconciled every job once and its queue is empty, and until a job applied
     after the kill shows Suspended.
Writes bench/results/operator_scale.{json,md}.

  /usr/bin/python3 bench/operator_scale.py [--jobs 1000] [--steady_seconds 60]
"""
import argparse
import json
import os
import re
import sys
import tempfile
import time
import urllib.request

import yaml

from _paths import ROOT
from bench_results import write_result
from harness.local_cluster import LocalCluster, wait_until

TRAININGJOBS = "/apis/paci.dev/v1alpha1/namespaces/default/trainingjobs"


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--steady_seconds", type=float, default=60)
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    return parser.parse_args()


def manifest(name):
    with open(os.path.join(ROOT, "examples", "trainingjob.yaml")) as f:
        job = yaml.safe_load(f)
    job["metadata"]["name"] = name
    job["spec"]["runPolicy"]["suspend"] = True
    return job


class Probe:
    """A process of the cluster, read from /proc, and an operator replica's /metrics."""

    def __init__(self, cluster):
        self.cluster = cluster

    def pid(self, name):
        return self.cluster.process(name).pid

    def cpu_seconds(self, name):
        with open("/proc/%d/stat" % self.pid(name)) as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_mb(self, name):
        with open("/proc/%d/status" % self.pid(name)) as f:
            return round(int(re.search(r"VmRSS:\s+(\d+) kB", f.read()).group(1)) / 1024, 1)

    def metrics(self, replica):
        port = self.cluster.operator_ports[replica]
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
            return r.read().decode()

    def leader(self):
        for replica in self.cluster.replicas:
            if self.cluster.procs[replica].poll() is None and re.search(
                    r"^paci_operator_is_leader 1$", self.metrics(replica), re.M):
                return replica
        return None

    def suspended(self):
        items = self.cluster.plane.request("GET", TRAININGJOBS)["items"]
        return sum(1 for j in items if j.get("status", {}).get("phase") == "Suspended")


def series_sum(metrics, name):
    """The sum of every series of a counter or gauge."""
    return sum(float(v) for v in re.findall(r"^%s(?:\{[^}]*\})? (\S+)$" % re.escape(name), metrics, re.M))


def buckets(metrics):
    """[(upper bound, cumulative count)] of the reconcile histogram."""
    found = re.findall(r'^paci_operator_reconcile_duration_seconds_bucket\{le="([^"]+)"\} (\S+)$', metrics, re.M)
    return [(float(le), float(count)) for le, count in found]


def quantile(q, before, after):
    """histogram_quantile over the reconciles between two scrapes, as Prometheus computes it
    (linear within the bucket that holds the rank)."""
    delta = [(le, a - b) for (le, a), (_, b) in zip(after, before)]
    total = delta[-1][1]
    if total <= 0:
        return None
    rank = q * total
    lower, below = 0.0, 0.0
    for le, count in delta:
        if count >= rank:
            if le == float("inf"):
                return lower
            return lower + (le - lower) * (rank - below) / max(count - below, 1e-9)
        lower, below = le, count
    return lower


def apply_phase(args, cluster, probe, leader):
    """1. --jobs suspended TrainingJobs applied in batches: latency, API load, CPU."""
    before = probe.metrics(leader)
    cpu0 = {n: probe.cpu_seconds(n) for n in ("kube-apiserver", leader)}
    start = time.monotonic()
    for first in range(0, args.jobs, 100):
        docs = [manifest("scale-%05d" % i) for i in range(first, min(args.jobs, first + 100))]
        cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs), timeout=600)
    applied = time.monotonic() - start
    wait_until("every job Suspended", lambda: probe.suspended() >= args.jobs, timeout=1800, interval=2)
    elapsed = time.monotonic() - start
    after = probe.metrics(leader)
    reconciles = series_sum(after, "paci_operator_reconcile_duration_seconds_count") - series_sum(
        before, "paci_operator_reconcile_duration_seconds_count")
    requests = series_sum(after, "paci_operator_kube_requests_total") - series_sum(
        before, "paci_operator_kube_requests_total")
    return {
        "kubectl_apply_s": round(applied, 1), "all_suspended_s": round(elapsed, 1),
        "jobs_per_second": round(args.jobs / elapsed, 1), "reconciles": int(reconciles),
        "reconcile_p50_ms": round(1000 * quantile(0.5, buckets(before), buckets(after)), 2),
        "reconcile_p99_ms": round(1000 * quantile(0.99, buckets(before), buckets(after)), 2),
        "operator_requests_per_second": round(requests / elapsed, 1),
        "apiserver_cpu_share": round((probe.cpu_seconds("kube-apiserver") - cpu0["kube-apiserver"]) / elapsed, 2),
        "leader_cpu_share": round((probe.cpu_seconds(leader) - cpu0[leader]) / elapsed, 2),
    }


def steady_phase(args, probe, leader):
    """2. Every job held: requests per second and memory, at the start and the end."""
    standby = next(r for r in probe.cluster.replicas if r != leader)
    rss0 = {r: probe.rss_mb(r) for r in (leader, standby)}
    requests0 = series_sum(probe.metrics(leader), "paci_operator_kube_requests_total")
    depth, rss = [], []
    end = time.monotonic() + args.steady_seconds
    while time.monotonic() < end:
        depth.append(series_sum(probe.metrics(leader), "paci_operator_workqueue_depth"))
        rss.append(probe.rss_mb(leader))
        time.sleep(1)  # one sample a second
    requests = series_sum(probe.metrics(leader), "paci_operator_kube_requests_total") - requests0
    return {
        "steady_seconds": args.steady_seconds,
        "steady_requests_per_second": round(requests / args.steady_seconds, 2),
        "max_queue_depth": int(max(depth)),
        "leader_rss_mb_by_quarter": [rss[len(rss) * q // 4] for q in range(4)] + [rss[-1]],
        "leader_rss_mb": [rss0[leader], probe.rss_mb(leader)],
        "standby_rss_mb": [rss0[standby], probe.rss_mb(standby)],
        "apiserver_rss_mb": probe.rss_mb("kube-apiserver"),
    }


def failover_phase(args, cluster, probe, leader):
    """3. SIGKILL of the leader: until the standby leads, has caught up, and serves a new job."""
    standby = next(r for r in cluster.replicas if r != leader)
    start = time.monotonic()
    cluster.kill(leader)
    wait_until("the standby leads", lambda: probe.leader() == standby, timeout=120, interval=0.05)
    leads = time.monotonic() - start

    def caught_up():
        m = probe.metrics(standby)
        return (series_sum(m, "paci_operator_reconcile_duration_seconds_count") >= args.jobs
                and series_sum(m, "paci_operator_workqueue_depth") == 0)
    wait_until("the new leader caught up", caught_up, timeout=1800, interval=0.2)
    caught = time.monotonic() - start
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(manifest("scale-after-failover")))
    wait_until("a new job Suspended", lambda: probe.suspended() >= args.jobs + 1, timeout=600, interval=0.2)
    return {"new_leader_s": round(leads, 2), "caught_up_s": round(caught, 2),
            "new_job_served_s": round(time.monotonic() - start, 2),
            "new_leader_rss_mb": probe.rss_mb(standby)}


def table(r):
    return "\n".join([
        "| %d suspended TrainingJobs | value |" % r["jobs"], "|---|---|",
        "| kubectl apply, in batches of 100 | %s s |" % r["kubectl_apply_s"],
        "| until all show Suspended | %s s (%s jobs/s) |" % (r["all_suspended_s"], r["jobs_per_second"]),
        "| reconciles meanwhile | %d |" % r["reconciles"],
        "| reconcile p50 / p99 (the leader's histogram) | %s / %s ms |" % (
            r["reconcile_p50_ms"], r["reconcile_p99_ms"]),
        "| the leader's API requests | %s /s |" % r["operator_requests_per_second"],
        "| CPU share meanwhile: kube-apiserver / leader | %s / %s of a core |" % (
            r["apiserver_cpu_share"], r["leader_cpu_share"]),
        "| held %ds: API requests, largest queue depth | %s /s, %d |" % (
            r["steady_seconds"], r["steady_requests_per_second"], r["max_queue_depth"]),
        "| RSS at the start and the end of the hold: leader, standby | %s -> %s MB, %s -> %s MB |" % (
            *r["leader_rss_mb"], *r["standby_rss_mb"]),
        "| the leader's RSS at each quarter of the hold | %s MB |" % " -> ".join(
            str(v) for v in r["leader_rss_mb_by_quarter"]),
        "| RSS of kube-apiserver | %s MB |" % r["apiserver_rss_mb"],
        "| SIGKILL of the leader: the standby leads after | %s s |" % r["new_leader_s"],
        "| ... has reconciled every job, queue empty, after | %s s |" % r["caught_up_s"],
        "| ... a job applied after the kill is Suspended after | %s s |" % r["new_job_served_s"],
    ])


def main():
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="paci-operator-scale-") as workdir, \
            LocalCluster(workdir, args.build, ROOT, runtime="process") as cluster:
        probe = Probe(cluster)
        leader = wait_until("a leader", probe.leader, timeout=60)
        print("applying %d suspended TrainingJobs ..." % args.jobs, file=sys.stderr)
        result = {"jobs": args.jobs, **apply_phase(args, cluster, probe, leader)}
        print("holding them %gs ..." % args.steady_seconds, file=sys.stderr)
        result.update(steady_phase(args, probe, leader))
        print("killing the leader ...", file=sys.stderr)
        result.update(failover_phase(args, cluster, probe, leader))
    text = table(result)
    write_result(args.out, "operator_scale", result, text)
    print(text)

if __name__ == "__main__":
    main()
