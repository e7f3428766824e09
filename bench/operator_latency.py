#!/usr/bin/python3
"""What the Kubernetes path costs: kubectl apply of a TrainingJob against a
direct SubmitJob to the coordinator, and how fast the operator reconciles.

Starts the local cluster of tests/harness/local_cluster.py (the real control plane, a
real Node (kubelet and containerd), a real coordinator, one operator) and measures, in one run:
  1. baseline: SubmitJob over gRPC with two workers already registered, to the
     job RUNNING and to its first optimizer step;
  2. the operator: `kubectl apply` of the same job (kubectl's own start-up
     included), to its worker pods existing, to .status.phase Running and to
     its first step in .status (polled over HTTP); as ratios to the baseline
     (pods must start: each worker process loads LibTorch);
  3. reconcile throughput: N suspended TrainingJobs applied at once, until
     every one shows phase Suspended, and the operator's reconcile latency
     from its /metrics.
Writes bench/results/operator_latency.{json,md}. Repeats (1) and (2) --rounds times.

  /usr/bin/python3 bench/operator_latency.py [--rounds 3] [--jobs 40]
"""
import argparse
import json
import os
import re
import statistics
import tempfile
import time
import urllib.request

import yaml

from _paths import ROOT, use_build
from harness.local_cluster import LocalCluster, wait_until


def job_manifest(name, steps=40, suspend=False):
    with open(os.path.join(ROOT, "examples", "trainingjob.yaml")) as f:
        manifest = yaml.safe_load(f)
    manifest["metadata"]["name"] = name
    manifest["spec"]["training"]["steps"] = steps
    manifest["spec"]["runPolicy"]["suspend"] = suspend
    return manifest


def load_stubs(build):
    """The generated Python modules of the protos, from the build folder."""
    use_build(build)
    import grpc
    from google.protobuf import json_format
    from paci.v1 import coordinator_pb2, coordinator_pb2_grpc, job_pb2
    return grpc, json_format, coordinator_pb2, coordinator_pb2_grpc, job_pb2


def measure_direct(stub, cpb, json_format, job_pb2, round_):
    """1. SubmitJob straight to the coordinator: seconds to RUNNING and to the first step."""
    spec = job_pb2.JobSpec()
    json_format.ParseDict({k: v for k, v in job_manifest("x")["spec"].items()
                           if k in ("model", "pipeline", "optimizer", "training", "data")}, spec)
    spec.name = "direct-%d" % round_
    spec.data.corpus_path = os.path.join(ROOT, spec.data.corpus_path)
    spec.run_policy.worker_selector["bench"] = "direct"

    def job():
        return stub.GetJob(cpb.GetJobRequest(name=spec.name))
    t0 = time.monotonic()
    stub.SubmitJob(cpb.SubmitJobRequest(spec=spec))
    running = wait_until("direct running", lambda: job().status.phase == cpb.RUNNING
                         and time.monotonic(), 60, 0.01)
    stepped = wait_until("direct first step", lambda: job().status.step > 0
                         and time.monotonic(), 60, 0.01)
    wait_until("direct done", lambda: job().status.phase == cpb.SUCCEEDED, 120, 0.1)
    return {"running": running - t0, "first_step": stepped - t0}


def measure_applied(cluster, api_get, round_):
    """2. kubectl apply of the same job: seconds to its pods, to Running, to the first step."""
    name = "applied-%d" % round_
    t0 = time.monotonic()
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(job_manifest(name)))

    # Polled over HTTP, not kubectl, whose start-up would be measured too.
    def status():
        return api_get("/apis/paci.dev/v1alpha1/namespaces/default/trainingjobs/" + name).get(
            "status", {})
    pods = wait_until("pods", lambda: len(api_get(
        "/api/v1/namespaces/default/pods?labelSelector=paci.dev%2Fjob-name%3D" + name)[
        "items"]) == 2 and time.monotonic(), 60, 0.01)
    running = wait_until("running", lambda: status().get("phase") in ("Running", "Succeeded")
                         and time.monotonic(), 60, 0.01)
    stepped = wait_until("first step", lambda: status().get("step", 0) > 0
                         and time.monotonic(), 60, 0.01)
    wait_until("done", lambda: status().get("phase") == "Succeeded", 120, 0.1)
    cluster.kubectl("delete", "trainingjob", name)
    return {"pods": pods - t0, "running": running - t0, "first_step": stepped - t0}


def measure_reconciles(cluster, jobs):
    """3. Reconcile throughput on suspended jobs (no pods, no training)."""
    docs = [job_manifest("idle-%d" % i, suspend=True) for i in range(jobs)]
    t0 = time.monotonic()
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
    applied = time.monotonic() - t0

    def suspended():
        items = json.loads(cluster.kubectl("get", "trainingjobs", "-o", "json").stdout)["items"]
        return sum(1 for j in items if j.get("status", {}).get("phase") == "Suspended")
    wait_until("all suspended", lambda: suspended() >= jobs, 300, 0.1)
    all_reconciled = time.monotonic() - t0
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" %
                                cluster.operator_ports["operator"]) as r:
        metrics = r.read().decode()
    return applied, all_reconciled, metrics


def run_cluster(args):
    """Every measurement on one local cluster; returns them with the operator's /metrics."""
    grpc, json_format, cpb, cgrpc, job_pb2 = load_stubs(args.build)
    with tempfile.TemporaryDirectory(prefix="paci-operator-bench-") as workdir:
        cluster = LocalCluster(workdir, args.build, ROOT, replicas=("operator",)).start()
        try:
            stub = cgrpc.CoordinatorStub(grpc.insecure_channel(cluster.coordinator_address))

            def api_get(path):
                return cluster.plane.request("GET", path)
            # Two workers for the direct path, placed by their own label.
            for i in range(2):
                cluster.spawn("direct-worker-%d" % i, [
                    os.path.join(args.build, "worker", "paci_worker"),
                    "--coordinator=" + cluster.coordinator_address,
                    "--worker_id=direct-%d" % i, "--labels=bench=direct"])
            wait_until("two direct workers", lambda: sum(
                1 for line in open(os.path.join(workdir, "coordinator.log"))
                if "worker direct-" in line and " connected" in line) >= 2, timeout=60)
            direct, operator = [], []
            for round_ in range(args.rounds):
                direct.append(measure_direct(stub, cpb, json_format, job_pb2, round_))
                operator.append(measure_applied(cluster, api_get, round_))
            applied, all_reconciled, metrics = measure_reconciles(cluster, args.jobs)
        finally:
            cluster.stop()
    return direct, operator, applied, all_reconciled, metrics


def summarize(args, direct, operator, applied, all_reconciled, metrics):
    """The result record and its Markdown table."""
    def value(name):
        m = re.search(r"^%s (\S+)$" % re.escape(name), metrics, re.M)
        return float(m.group(1)) if m else 0.0
    reconciles = value("paci_operator_reconcile_duration_seconds_count")
    mean_reconcile = value("paci_operator_reconcile_duration_seconds_sum") / max(reconciles, 1)

    def median(rows, key):
        return statistics.median(r[key] for r in rows)
    result = {
        "rounds": args.rounds,
        "direct": direct, "operator": operator,
        "direct_running_s": median(direct, "running"),
        "direct_first_step_s": median(direct, "first_step"),
        "operator_pods_s": median(operator, "pods"),
        "operator_running_s": median(operator, "running"),
        "operator_first_step_s": median(operator, "first_step"),
        "suspended_jobs": args.jobs, "kubectl_apply_s": applied,
        "all_reconciled_s": all_reconciled, "jobs_per_second": args.jobs / all_reconciled,
        "reconciles": reconciles, "mean_reconcile_ms": 1000 * mean_reconcile,
    }
    rows = [
        ("SubmitJob to RUNNING, workers up (baseline)", result["direct_running_s"], 1.0),
        ("kubectl apply to worker pods created", result["operator_pods_s"], None),
        ("kubectl apply to phase Running", result["operator_running_s"],
         result["operator_running_s"] / result["direct_running_s"]),
        ("SubmitJob to first step, workers up (baseline)", result["direct_first_step_s"], 1.0),
        ("kubectl apply to first step in .status", result["operator_first_step_s"],
         result["operator_first_step_s"] / result["direct_first_step_s"]),
    ]
    lines = ["| measurement (median of %d) | seconds | vs baseline |" % args.rounds,
             "|---|---|---|"]
    for label, seconds, ratio in rows:
        lines.append("| %s | %.3f | %s |" % (label, seconds, "%.1fx" % ratio if ratio else ""))
    lines.append("")
    lines.append("%d suspended TrainingJobs: kubectl apply %.2f s, all reconciled to Suspended in "
                 "%.2f s (%.1f jobs/s); %d reconciles, mean %.1f ms each" % (
                     args.jobs, applied, all_reconciled, result["jobs_per_second"], reconciles,
                     result["mean_reconcile_ms"]))
    return result, "\n".join(lines)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--jobs", type=int, default=40)
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "operator_latency"))
    args = parser.parse_args()
    result, table = summarize(args, *run_cluster(args))
    print(table)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out + ".json", "w") as f:
        json.dump(result, f, indent=2)
    with open(args.out + ".md", "w") as f:
        f.write(table + "\n")


if __name__ == "__main__":
    main()
