#!/usr/bin/python3
"""The operator holding many TrainingJobs: reconcile latency, API load, memory,
and how long a new leader takes to catch up.

Starts the local cluster of tests/harness/local_cluster.py (the real control plane, a
real coordinator, two operator replicas electing a leader; a Node, though no
pod is made: the jobs are suspended, so each reconcile reads, decides
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
     after the kill shows Suspended;
  4. a backlog: with no operator running, applies --jobs more suspended
     TrainingJobs, then starts one replica: its sustained rate through them
     (jobs brought to Suspended per second, from the moment it leads) and its
     reconcile p50/p99 meanwhile;
  5. the same API server's limit for that work: with no operator running, a
     plain client (persistent connections, as many threads as the operator has
     reconcile workers) writes for each of --jobs more suspended TrainingJobs
     what a reconcile writes for one, its finalizer, its status and an Event.
     The backlog's rate over this one is the operator's share of the limit.
Writes bench/results/operator_scale.{json,md}.

  /usr/bin/python3 bench/operator_scale.py [--jobs 1000] [--steady_seconds 60]
(the apply phase's jobs also fix the count of the backlog and of the plain client's)
"""
import argparse
import datetime
import http.client
import json
import os
import queue
import re
import sys
import tempfile
import threading
import time
import urllib.parse
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


def apply_suspended(cluster, prefix, count):
    for first in range(0, count, 100):
        docs = [manifest("%s-%05d" % (prefix, i)) for i in range(first, min(count, first + 100))]
        cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs), timeout=600)


def stop_operators(cluster):
    for replica in cluster.replicas:
        cluster.kill(replica)


def burst_phase(args, cluster, probe, held):
    """4. A backlog applied while no operator runs, then one replica: its sustained rate."""
    stop_operators(cluster)
    apply_suspended(cluster, "burst", args.jobs)
    replica = cluster.replicas[0]
    cluster.start_operator(replica, append=True)
    wait_until("the restarted replica leads", lambda: probe.leader() == replica, timeout=120,
               interval=0.05)
    start = time.monotonic()
    wait_until("every backlog job Suspended", lambda: probe.suspended() >= held + args.jobs,
               timeout=1800, interval=0.5)
    elapsed = time.monotonic() - start
    after = probe.metrics(replica)
    zero = [(le, 0.0) for le, _ in buckets(after)]
    return {
        "burst_s": round(elapsed, 1), "burst_jobs_per_second": round(args.jobs / elapsed, 1),
        # It lists every job at its start and reconciles each: those held already need no write.
        "burst_reconciles": int(series_sum(after, "paci_operator_reconcile_duration_seconds_count")),
        "burst_reconcile_p50_ms": round(1000 * quantile(0.5, zero, buckets(after)), 2),
        "burst_reconcile_p99_ms": round(1000 * quantile(0.99, zero, buckets(after)), 2),
        "burst_requests": int(series_sum(after, "paci_operator_kube_requests_total")),
    }


def plain_client_phase(args, cluster, workers=2):
    """5. What a plain client sustains writing what a reconcile of a new suspended job writes."""
    stop_operators(cluster)
    apply_suspended(cluster, "plain", args.jobs)
    plane = cluster.plane
    url = urllib.parse.urlparse(plane.url)
    path = TRAININGJOBS + "/"
    names = queue.Queue()
    for i in range(args.jobs):
        names.put("plain-%05d" % i)
    errors = []

    def work():
        connection = http.client.HTTPSConnection(url.hostname, url.port, context=plane.ssl_context(),
                                                 timeout=30)

        def call(method, target, body, content_type="application/json"):
            connection.request(method, target, body=json.dumps(body), headers={
                "Authorization": "Bearer " + plane.tokens["admin"], "Accept": "application/json",
                "Content-Type": content_type})
            response = connection.getresponse()
            text = response.read()
            if response.status >= 300:
                raise RuntimeError("%s %s: %d %s" % (method, target, response.status, text[:200]))
            return json.loads(text)

        try:
            while True:
                try:
                    name = names.get_nowait()
                except queue.Empty:
                    return
                now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
                obj = call("PATCH", path + name, {"metadata": {
                    "finalizers": ["paci.dev/cancel-at-coordinator"]}}, "application/merge-patch+json")
                obj["status"] = {"phase": "Suspended", "observedGeneration": 1, "conditions": [{
                    "type": "Suspended", "status": "True", "reason": "Suspended",
                    "message": "spec.runPolicy.suspend is true", "lastTransitionTime": now,
                    "observedGeneration": 1}]}
                call("PUT", path + name + "/status", obj)
                call("POST", "/api/v1/namespaces/default/events", {
                    "metadata": {"generateName": name + "."},
                    "involvedObject": {"apiVersion": "paci.dev/v1alpha1", "kind": "TrainingJob",
                                       "name": name, "namespace": "default",
                                       "uid": obj["metadata"]["uid"]},
                    "reason": "Suspended", "message": "stopped its workers", "type": "Normal",
                    "source": {"component": "plain-client"}, "firstTimestamp": now,
                    "lastTimestamp": now, "count": 1})
        except Exception as error:  # noqa: BLE001 - reported below
            errors.append(error)

    threads = [threading.Thread(target=work) for _ in range(workers)]
    start = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.monotonic() - start
    if errors:
        raise errors[0]
    return {"plain_s": round(elapsed, 1), "plain_jobs_per_second": round(args.jobs / elapsed, 1),
            "plain_workers": workers}


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
        "| a backlog of %d more, one replica started: through it in | %s s (%s jobs/s; %d reconciles, "
        "%d API requests) |" % (r["jobs"], r["burst_s"], r["burst_jobs_per_second"],
                                r["burst_reconciles"], r["burst_requests"]),
        "| ... reconcile p50 / p99 meanwhile | %s / %s ms |" % (
            r["burst_reconcile_p50_ms"], r["burst_reconcile_p99_ms"]),
        "| the API server's limit: a plain client (%d threads) writing finalizer, status and an Event "
        "for %d more | %s s (%s jobs/s) |" % (r["plain_workers"], r["jobs"], r["plain_s"],
                                            r["plain_jobs_per_second"]),
        "| **the operator's share of that limit** | **%.2f** |" % r["share_of_limit"],
    ])


def main():
    args = parse_args()
    with tempfile.TemporaryDirectory(prefix="paci-operator-scale-") as workdir, \
            LocalCluster(workdir, args.build, ROOT) as cluster:
        probe = Probe(cluster)
        leader = wait_until("a leader", probe.leader, timeout=60)
        print("applying %d suspended TrainingJobs ..." % args.jobs, file=sys.stderr)
        result = {"jobs": args.jobs, **apply_phase(args, cluster, probe, leader)}
        print("holding them %gs ..." % args.steady_seconds, file=sys.stderr)
        result.update(steady_phase(args, probe, leader))
        print("killing the leader ...", file=sys.stderr)
        result.update(failover_phase(args, cluster, probe, leader))
        print("a backlog for one replica ...", file=sys.stderr)
        result.update(burst_phase(args, cluster, probe, held=args.jobs + 1))
        print("the plain client ...", file=sys.stderr)
        result.update(plain_client_phase(args, cluster))
        result["share_of_limit"] = round(result["burst_jobs_per_second"] / result["plain_jobs_per_second"], 2)
    text = table(result)
    write_result(args.out, "operator_scale", result, text)
    print(text)

if __name__ == "__main__":
    main()
