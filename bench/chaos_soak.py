#!/usr/bin/python3
"""Chaos soak: a stream of small checkpointed TrainingJobs through the local
cluster of tests/harness/local_cluster.py (the real control plane enforcing the
restricted Pod Security level, a real kubelet running worker pods as containers,
a real coordinator, two operator replicas electing a leader), while SIGKILLs
hit, at random moments, worker pods, the coordinator (started again on its
address and store, as its Deployment would) and the leading operator (started
again as a standby a few seconds later).

When the time is up the kills stop, no job is added, and the jobs in flight
finish. Then it checks, and fails (exit status 1) naming what broke:
  - every TrainingJob applied ended Succeeded at its last step (the script
    causes no failure on purpose, so no Failed is allowed);
  - no job lost or duplicated: each TrainingJob has exactly one coordinator
    job, SUCCEEDED, and the coordinator holds no other;
  - every loss history (train and validation) is strictly increasing in step;
  - every restart resumed from a checkpoint no older than one interval: the
    last step reported before it, less the step it resumed from, is at most
    checkpoint.interval.
It prints and writes (bench/results/chaos_soak.{json,md}) a table: kills by
kind, restarts, jobs, steps retrained, and the longest recovery of each kind
(a worker or coordinator kill: until every job running at the kill has
reported a step past the one it had reached; an operator kill: until a live
replica leads).

Not part of ctest: run it in one command, for as long as you like
(scripts/build.sh and scripts/build-images.sh first):
  /usr/bin/python3 bench/chaos_soak.py [--minutes 10] [--seed 1] [--concurrent 2]
"""
import argparse
import contextlib
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import yaml

from _paths import ROOT, use_build
from bench_results import write_result
from harness.local_cluster import LocalCluster, wait_until
from harness.pki import make_pki, mutual_tls_args, worker_secret

KINDS = ("worker", "coordinator", "operator")
SHARED = {"volumes": [{"name": "shared", "persistentVolumeClaim": {"claimName": "paci-shared"}}],
          "volumeMounts": [{"name": "shared", "mountPath": "/shared"}]}


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--minutes", type=float, default=10, help="how long kills go on")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", metavar="DIR",
                        help="run the cluster in DIR and keep it afterwards: every process's log "
                             "(coordinator.log, operator-*.log, paci-node/ with the kubelet's and containerd's)")
    parser.add_argument("--concurrent", type=int, default=2, help="TrainingJobs in flight")
    parser.add_argument("--steps", type=int, default=1500, help="steps of each job")
    parser.add_argument("--interval", type=int, default=100, help="checkpoint.interval of each job")
    parser.add_argument("--mean_kill_seconds", type=float, default=20,
                        help="mean time between kills (exponential)")
    parser.add_argument("--weights", default="6,2,2", help="worker,coordinator,operator odds")
    parser.add_argument("--drain_minutes", type=float, default=15,
                        help="how long the jobs in flight may take to finish after the kills stop")
    parser.add_argument("--secure", action="store_true",
                        help="the coordinator under mutual TLS and a token, the operator and the "
                             "workers with their own certificates (tests/harness/pki.py); "
                             "results as chaos_soak_secure")
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    return parser.parse_args()


def load_stubs(build):
    use_build(build)
    import grpc
    from paci.v1 import coordinator_pb2, coordinator_pb2_grpc
    return grpc, coordinator_pb2, coordinator_pb2_grpc


class Soak:
    def __init__(self, args, cluster, stubs, pki=None):
        self.args = args
        self.cluster = cluster
        self.grpc, self.cpb, cgrpc = stubs
        # Reconnecting as the workers and the operator do (CreateCoordinatorChannel), so a
        # recovery is not measured late by this client's own backoff.
        self.pki, self.cgrpc = pki, cgrpc
        self.metadata = ()
        if pki:
            with open(pki["token"]) as f:
                self.metadata = (("authorization", "Bearer " + f.read().strip()),)
        self.connect()
        self.rng = random.Random(args.seed)
        self.lock = threading.Lock()
        self.jobs = {}        # TrainingJob name -> Tracked
        self.kills = []       # Kill
        self.errors = []      # what the observer saw break while it ran
        self.stop_kills = threading.Event()
        self.stop_observer = threading.Event()
        self.started = time.monotonic()

    # ---- the API server and the coordinator, as a user reads them ----

    def api(self, path):
        return self.cluster.plane.request("GET", path)

    def training_jobs(self):
        return {j["metadata"]["name"]: j for j in
                self.api("/apis/paci.dev/v1alpha1/namespaces/default/trainingjobs")["items"]}

    def connect(self):
        """A channel to the coordinator; secure: a client of the CA (the operator's certificate)."""
        options = [("grpc.initial_reconnect_backoff_ms", 100), ("grpc.min_reconnect_backoff_ms", 100),
                   ("grpc.max_reconnect_backoff_ms", 1000)]
        if self.pki:
            def read(key):
                with open(self.pki[key], "rb") as f:
                    return f.read()
            channel = self.grpc.secure_channel(self.cluster.coordinator_address, self.grpc.ssl_channel_credentials(
                root_certificates=read("ca.crt"), private_key=read("operator.key"),
                certificate_chain=read("operator.crt")), options=options)
        else:
            channel = self.grpc.insecure_channel(self.cluster.coordinator_address, options=options)
        self.coordinator = self.cgrpc.CoordinatorStub(channel)

    def coordinator_jobs(self, omit_loss_history=True):
        """Every coordinator job of the soak, by name (all pages)."""
        jobs, token = {}, ""
        while True:
            page = self.coordinator.ListJobs(self.cpb.ListJobsRequest(
                name_prefix="soak-", page_size=1000, page_token=token,
                omit_loss_history=omit_loss_history), timeout=10, metadata=self.metadata)
            jobs.update((j.name, j) for j in page.jobs)
            token = page.next_page_token
            if not token:
                return jobs

    def apply_job(self, index):
        name = "soak-%04d" % index
        with open(os.path.join(ROOT, "examples", "trainingjob.yaml")) as f:
            manifest = yaml.safe_load(f)
        manifest["metadata"]["name"] = name
        manifest["spec"]["training"].update(steps=self.args.steps, evalInterval=self.args.interval)
        manifest["spec"]["checkpoint"] = {"directory": "/shared/" + name,
                                          "interval": self.args.interval, "resume": True}
        # Every kill is the script's: a job must survive as many as it meets.
        manifest["spec"]["runPolicy"]["backoffLimit"] = 1000
        manifest["spec"]["worker"].update(SHARED)
        self.cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(manifest))
        with self.lock:
            self.jobs[name] = Tracked(name)
        return name

    # ---- the stream of jobs ----

    def stream(self):
        """Keeps --concurrent jobs unfinished until the kills stop."""
        index = 0
        while not self.stop_kills.is_set():
            with self.lock:
                open_jobs = sum(1 for t in self.jobs.values() if not t.finished)
            for _ in range(self.args.concurrent - open_jobs):
                index += 1
                self.apply_job(index)
            self.stop_kills.wait(1)

    # ---- the observer ----

    def observe(self):
        while not self.stop_observer.is_set():
            try:
                tjobs = self.training_jobs()
                cjobs = self.coordinator_jobs()
            except (OSError, ValueError, self.grpc.RpcError) as error:
                # The coordinator is down: look again. A secure channel of this Python client
                # was seen to stay failed after restarts of the coordinator while a new one got
                # answers at once: a failed call opens a new channel.
                if isinstance(error, self.grpc.RpcError) and self.pki:
                    self.connect()
                self.stop_observer.wait(0.3)
                continue
            now = time.monotonic()
            with self.lock:
                for name, tracked in self.jobs.items():
                    status = tjobs.get(name, {}).get("status", {})
                    tracked.see(status, cjobs.get(status.get("coordinatorJob", "")), self.args.interval,
                                self.errors)
                for kill in self.kills:
                    kill.check(now, self)
            self.stop_observer.wait(0.3)

    # ---- the killer ----

    def kill_loop(self):
        weights = [float(w) for w in self.args.weights.split(",")]
        while not self.stop_kills.wait(self.rng.expovariate(1.0 / self.args.mean_kill_seconds)):
            kind = self.rng.choices(KINDS, weights)[0]
            try:
                getattr(self, "kill_" + kind)()
            except (OSError, ValueError, AssertionError, subprocess.SubprocessError) as e:
                print("  kill of a %s not done: %s" % (kind, e), flush=True)

    def record_kill(self, kind, target):
        with self.lock:
            self.kills.append(Kill(kind, target, time.monotonic(), self.jobs))
        print("  %6.0fs  SIGKILL %-11s %s" % (time.monotonic() - self.started, kind, target), flush=True)

    def kill_worker(self):
        pods = [p for p in self.api("/api/v1/namespaces/default/pods")["items"]
                if p.get("status", {}).get("phase") == "Running"
                and p["metadata"]["name"].startswith("soak-")
                and p["status"].get("containerStatuses", [{}])[0].get("containerID")]
        if not pods:
            return
        pod = self.rng.choice(pods)
        self.record_kill("worker", pod["metadata"]["name"])
        self.cluster.kill_container(pod)

    def kill_coordinator(self):
        self.record_kill("coordinator", self.cluster.coordinator_address)
        self.cluster.kill("coordinator")
        time.sleep(self.rng.uniform(0, 3))  # a Deployment takes a moment to start another
        self.cluster.restart_coordinator()

    def kill_operator(self):
        leader = self.leader()
        if leader is None:
            return
        self.record_kill("operator", leader)
        self.cluster.kill(leader)
        threading.Timer(5, self.cluster.start_operator, args=(leader, True)).start()

    def leader(self):
        """The live operator replica that says it leads, if exactly one does."""
        leaders = []
        for replica, port in list(self.cluster.operator_ports.items()):
            if self.cluster.procs[replica].poll() is not None:
                continue
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=2) as r:
                    if "\npaci_operator_is_leader 1" in "\n" + r.read().decode():
                        leaders.append(replica)
            except OSError:
                pass
        return leaders[0] if len(leaders) == 1 else None


class Tracked:
    """What the observer knows of one TrainingJob, from its status and its coordinator job."""

    def __init__(self, name):
        self.name = name
        self.phase = ""
        self.step = 0            # the step the job has reached, as far as it is known
        self.restarts = 0
        self.coordinator_job = ""
        self.attempt_max = 0     # the last step the current attempt reported
        self.stale = None        # a dead attempt's step, shown until the new attempt reports
        self.resumes = []        # (last step reported before a restart, the step it resumed from)
        self.finished = False

    def see(self, status, cjob, interval, errors):
        self.phase = status.get("phase", "")
        self.coordinator_job = status.get("coordinatorJob", "")
        self.finished = self.phase in ("Succeeded", "Failed")
        if cjob is None:
            return
        st = cjob.status
        if st.restarts > self.restarts:
            self.resumes.append((self.attempt_max, st.checkpoint_step))
            if self.attempt_max - st.checkpoint_step > interval:
                errors.append("%s: restart %d resumed from step %d, %d steps before the last one "
                              "reported (%d): more than one checkpoint interval" % (
                                  self.name, st.restarts, st.checkpoint_step,
                                  self.attempt_max - st.checkpoint_step, self.attempt_max))
            self.restarts = st.restarts
            self.attempt_max = st.checkpoint_step
            self.stale = st.step
        if st.step != self.stale:
            self.stale = None
            self.attempt_max = max(self.attempt_max, st.step)
        self.step = self.attempt_max

    def retrained(self):
        return sum(max(0, last - resumed) for last, resumed in self.resumes)


class Kill:
    """One SIGKILL, and when what it hit had recovered."""

    def __init__(self, kind, target, at, jobs):
        self.kind = kind
        self.target = target
        self.at = at
        # The jobs running at the kill: name -> (step reached, restarts so far).
        self.running = {n: (t.step, t.restarts) for n, t in jobs.items() if t.phase == "Running"}
        self.victim = target.rsplit("-worker-", 1)[0] if kind == "worker" else None
        self.recovered_after = None

    def check(self, now, soak):
        if self.recovered_after is not None:
            return
        if self.kind == "operator":
            done = soak.leader() is not None
        else:
            done = all(self.recovered(soak.jobs[n], step, restarts)
                       for n, (step, restarts) in self.running.items())
        if done:
            self.recovered_after = now - self.at

    def recovered(self, job, step, restarts):
        if job.finished:
            return True
        restarted = job.name != self.victim or job.restarts > restarts
        return restarted and job.step > step


def final_checks(soak, tjobs, cjobs):
    """What must hold once every job has finished: a list of problems, empty when none."""
    problems = list(soak.errors)
    owned = set()
    for name, tracked in sorted(soak.jobs.items()):
        tj = tjobs.get(name)
        if tj is None:
            problems.append("%s: the TrainingJob is gone (lost)" % name)
            continue
        status = tj.get("status", {})
        if status.get("phase") != "Succeeded" or status.get("step") != soak.args.steps:
            problems.append("%s: ended %s at step %s (%s)" % (name, status.get("phase"), status.get("step"),
                                                             status.get("message", "")))
        mine = [c for c in cjobs if c.startswith(name + "-")]
        owned.update(mine)
        if mine != [status.get("coordinatorJob")]:
            problems.append("%s: coordinator jobs %s, expected exactly its own %r (lost or duplicated)"
                            % (name, mine, status.get("coordinatorJob")))
            continue
        cjob = cjobs[mine[0]]
        if cjob.status.phase != soak.cpb.SUCCEEDED:
            problems.append("%s: the coordinator job %s is %s" % (
                name, mine[0], soak.cpb.JobPhase.Name(cjob.status.phase)))
        for kind in ("train_loss_history", "validation_loss_history"):
            steps = [p.step for p in getattr(cjob.status, kind)]
            if any(b <= a for a, b in zip(steps, steps[1:])):
                problems.append("%s: %s is not strictly increasing in step: %s" % (name, kind, steps))
            if not steps:
                problems.append("%s: %s is empty" % (name, kind))
    for stray in sorted(set(cjobs) - owned):
        problems.append("the coordinator holds %s, which no TrainingJob owns" % stray)
    return problems


def summarize(soak, minutes, tjobs, problems):
    kills = {kind: [k for k in soak.kills if k.kind == kind] for kind in KINDS}
    recoveries = {kind: [k.recovered_after for k in ks if k.recovered_after is not None]
                  for kind, ks in kills.items()}
    phases = [t.get("status", {}).get("phase") for n, t in tjobs.items() if n in soak.jobs]
    return {
        "minutes_of_kills": round(minutes, 1),
        "kills": {kind: len(ks) for kind, ks in kills.items()},
        "kills_not_recovered": sum(1 for k in soak.kills if k.recovered_after is None),
        "longest_recovery_s": {kind: round(max(r), 1) if r else None for kind, r in recoveries.items()},
        "median_recovery_s": {kind: round(sorted(r)[len(r) // 2], 1) if r else None
                              for kind, r in recoveries.items()},
        "jobs": len(soak.jobs), "succeeded": phases.count("Succeeded"), "failed": phases.count("Failed"),
        "restarts": sum(t.restarts for t in soak.jobs.values()),
        "steps_retrained": sum(t.retrained() for t in soak.jobs.values()),
        "steps_trained": soak.args.steps * len(soak.jobs),
        "checkpoint_interval": soak.args.interval,
        "problems": problems,
        "kill_log": [{"at_s": round(k.at - soak.started, 1), "kind": k.kind, "target": k.target,
                      "jobs_running": sorted(k.running), "recovered_after_s":
                      None if k.recovered_after is None else round(k.recovered_after, 1),
                      "victim_restarts_after": soak.jobs[k.victim].restarts if k.victim in soak.jobs else None}
                     for k in soak.kills],
    }


def table(result):
    rows = ["| kind | kills | median recovery s | longest recovery s |", "|---|---|---|---|"]
    for kind in KINDS:
        rows.append("| %s | %d | %s | %s |" % (kind, result["kills"][kind], result["median_recovery_s"][kind],
                                              result["longest_recovery_s"][kind]))
    rows.append("")
    rows.append("%s minutes of kills: %d jobs of %d steps, %d Succeeded, %d Failed; %d restarts; %d steps "
                "retrained of %d (checkpoint interval %d); %d kills not recovered; %s." % (
                    result["minutes_of_kills"], result["jobs"], result["steps_trained"] // max(1, result["jobs"]),
                    result["succeeded"], result["failed"], result["restarts"], result["steps_retrained"],
                    result["steps_trained"], result["checkpoint_interval"], result["kills_not_recovered"],
                    "no problem found" if not result["problems"] else
                    "%d problems: %s" % (len(result["problems"]), "; ".join(result["problems"]))))
    return "\n".join(rows)


def run(args, cluster, pki=None):
    soak = Soak(args, cluster, load_stubs(args.build), pki)
    threads = [threading.Thread(target=f, daemon=True, name=f.__name__)
               for f in (soak.stream, soak.observe, soak.kill_loop)]
    for t in threads:
        t.start()
    print("soak: kills for %g minutes, %d jobs in flight" % (args.minutes, args.concurrent), flush=True)
    soak.stop_kills.wait(args.minutes * 60)
    soak.stop_kills.set()
    minutes = (time.monotonic() - soak.started) / 60
    threads[0].join()
    threads[2].join()
    print("soak: kills stopped; waiting for the %d jobs in flight" %
          sum(1 for t in soak.jobs.values() if not t.finished), flush=True)
    # A restarted operator replica comes 5 s after its kill; let it, then wait for the jobs.
    time.sleep(6)
    wait_until("every job finished", lambda: all(t.finished for t in soak.jobs.values()),
               timeout=args.drain_minutes * 60, interval=1)
    time.sleep(1)  # one more look of the observer at every last kill
    soak.stop_observer.set()
    threads[1].join()
    tjobs = soak.training_jobs()
    cjobs = soak.coordinator_jobs(omit_loss_history=False)
    return summarize(soak, minutes, tjobs, final_checks(soak, tjobs, cjobs))


def main():
    args = parse_args()
    with (contextlib.nullcontext(os.path.abspath(args.keep)) if args.keep
          else tempfile.TemporaryDirectory(prefix="paci-soak-")) as workdir:
        os.makedirs(workdir, exist_ok=True)
        coordinator_args, operator_args, secrets, pki = [], [], [], None
        if args.secure:
            pki = make_pki(workdir)
            coordinator_args, operator_args = mutual_tls_args(pki, "paci-worker-credentials")
            secrets = [worker_secret(pki, "paci-worker-credentials", "default")]
        with LocalCluster(workdir, args.build, ROOT, coordinator_args=coordinator_args,
                          operator_args=operator_args) as cluster:
            result = soak(args, cluster, secrets, pki)
    text = table(result)
    write_result(args.out, "chaos_soak_secure" if args.secure else "chaos_soak", result, text)
    print(text)
    return 1 if result["problems"] or result["failed"] else 0


def soak(args, cluster, secrets, pki):
    """The namespace (restricted), its claim and the worker Secret when secure; then the run."""
    cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all([
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default", "labels": {
            "pod-security.kubernetes.io/enforce": "restricted"}}},
        {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
         "metadata": {"name": "paci-shared", "namespace": "default"},
         "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}}] + secrets))
    return run(args, cluster, pki)


if __name__ == "__main__":
    sys.exit(main())
