"""A coordinator process and worker processes on 127.0.0.1, driven from Python
through the stubs generated from proto/ (BUILD/python on the module path):

    cluster = Cluster(workdir, workers=2)
    cluster.submit(spec("tiny", steps=20))
    job = cluster.wait("tiny", lambda j: phase(j) == "SUCCEEDED")
    cluster.stop()
"""
import os
import re
import signal
import subprocess
import threading
import time

import grpc
from paci.v1 import coordinator_pb2 as cpb
from paci.v1 import coordinator_pb2_grpc as cgrpc
from paci.v1 import job_pb2

from .paths import COORDINATOR, CORPUS, WORKER

# The coordinator's line once it serves: "coordinator serving on 127.0.0.1:PORT (...".
SERVING = re.compile(r"coordinator serving on \S+:(\d+) \(")


def spec(name, P=2, steps=30, a=2, checkpoint=None, checkpoint_interval=5, **run_policy):
    s = job_pb2.JobSpec(name=name)
    s.model.vocab_size, s.model.num_layers, s.model.d_model = 80, 4, 32
    s.model.num_heads, s.model.seq_len = 4, 32
    s.pipeline.num_stages, s.pipeline.schedule = P, "paci"
    s.pipeline.accumulation, s.pipeline.micro_batch_size = a, 4
    s.optimizer.lr = 3e-3
    s.training.steps, s.training.eval_interval = steps, max(1, steps // 3)
    s.data.corpus_path = CORPUS
    if checkpoint:
        s.checkpoint.directory, s.checkpoint.interval = checkpoint, checkpoint_interval
    for key, value in run_policy.items():
        setattr(s.run_policy, key, value)
    return s


class Cluster:
    """A coordinator process and worker processes, all on loopback."""

    def __init__(self, workdir, workers=2, token=None, port=0, extra=(), worker_extra=(),
                 credentials=None, target_name=None):
        """credentials: the tests' channel to a TLS coordinator; target_name: the name its
        certificate must carry when that is not the address's (grpc.ssl_target_name_override)."""
        self.workdir = workdir
        self.target_name = target_name
        self.worker_extra = list(worker_extra)
        self.credentials = credentials
        self.db = os.path.join(workdir, "coordinator.db")
        self.token = token
        self.workers = {}
        self.logs = []
        self.logged = threading.Condition()  # notified on every line appended to logs
        self.start_coordinator(port, extra)
        for i in range(workers):
            self.add_worker("w%d" % i)

    def _pump(self, proc, tag):
        for line in iter(proc.stdout.readline, ""):
            with self.logged:
                self.logs.append("[%s] %s" % (tag, line))
                self.logged.notify_all()
        proc.stdout.close()
        with self.logged:  # its output ended: a waiter for it can stop waiting
            self.logged.notify_all()

    def wait_for_log(self, pattern, timeout=30):
        """Waits until a process has logged a line matching the regular expression `pattern`;
        False after `timeout` seconds."""
        with self.logged:
            return self.logged.wait_for(
                lambda: any(re.search(pattern, line) for line in self.logs), timeout)

    def _serving_ports(self):
        """The ports of the coordinator's "serving on" lines so far (one per start)."""
        return [int(m.group(1)) for line in self.logs if line.startswith("[coordinator]")
                for m in [SERVING.search(line)] if m]

    def start_coordinator(self, port=0, extra=()):
        args = [COORDINATOR, "--listen=127.0.0.1:%d" % port, "--db=" + self.db,
                "--heartbeat_timeout_seconds=2",
                "--reconnect_grace_seconds=6"] + list(extra)
        if self.token:
            token_file = os.path.join(self.workdir, "token")
            with open(token_file, "w") as f:
                f.write(self.token + "\n")
            args.append("--auth_token_file=" + token_file)
        with self.logged:
            started = len(self._serving_ports())
        self.coordinator = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                            text=True)
        threading.Thread(target=self._pump, args=(self.coordinator, "coordinator"),
                         daemon=True).start()
        # Serving once it logs so (with the port it bound); or it exited.
        with self.logged:
            serving = self.logged.wait_for(
                lambda: len(self._serving_ports()) > started or self.coordinator.poll() is not None,
                timeout=30)
            ports = self._serving_ports()
        if not serving or len(ports) == started:
            raise RuntimeError("coordinator did not start:\n" + "".join(self.logs))
        self.port = ports[-1]
        self.address = "127.0.0.1:%d" % self.port
        options = (("grpc.ssl_target_name_override", self.target_name),) if self.target_name else ()
        self.channel = (grpc.secure_channel(self.address, self.credentials, options=options) if self.credentials
                        else grpc.insecure_channel(self.address))
        self.stub = cgrpc.CoordinatorStub(self.channel)

    def add_worker(self, worker_id):
        args = [WORKER, "--coordinator=" + self.address, "--worker_id=" + worker_id]
        args += self.worker_extra
        if self.token:
            args.append("--coordinator_auth_token_file=" + os.path.join(self.workdir, "token"))
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        threading.Thread(target=self._pump, args=(proc, worker_id), daemon=True).start()
        self.workers[worker_id] = proc
        return proc

    def metadata(self):
        return (("authorization", "Bearer " + self.token),) if self.token else ()

    def submit(self, job_spec):
        return self.stub.SubmitJob(cpb.SubmitJobRequest(spec=job_spec), metadata=self.metadata())

    def get(self, name):
        return self.stub.GetJob(cpb.GetJobRequest(name=name), metadata=self.metadata())

    def wait(self, name, predicate, timeout=300):
        """Follows the job's changes (WatchJob) until predicate(job) holds; returns the job.
        A stream that ends (the job finished, the coordinator restarted, the job is not there
        yet) is opened again once a process has logged more, within `timeout`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.logged:
                seen = len(self.logs)
            try:
                for job in self.stub.WatchJob(cpb.WatchJobRequest(name=name),
                                              metadata=self.metadata(),
                                              timeout=max(0.1, deadline - time.monotonic()),
                                              wait_for_ready=True):
                    if predicate(job):
                        return job
            except grpc.RpcError:
                pass
            # Nothing more comes on this stream: wait for something to happen.
            with self.logged:
                self.logged.wait_for(lambda: len(self.logs) > seen,
                                     timeout=max(0, min(1, deadline - time.monotonic())))
        raise AssertionError("job %s: condition not reached; last logs:\n%s" %
                             (name, "".join(self.logs[-60:])))

    def watch(self, name):
        return list(self.stub.WatchJob(cpb.WatchJobRequest(name=name), metadata=self.metadata(),
                                       timeout=300))

    def stop(self):
        for proc in list(self.workers.values()) + [self.coordinator]:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in list(self.workers.values()) + [self.coordinator]:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.channel.close()


def phase(job):
    return cpb.JobPhase.Name(job.status.phase)
