"""The test API server (apiserver.py) as a process for a test: on 127.0.0.1,
port 0, with a kubeconfig for it and the real kubectl pointed at it.

    api = ApiServerProcess(workdir)          # started
    api.kubectl("apply", "-f", path)         # a CompletedProcess
    api.stop()                               # AssertionError if the server logged a traceback
"""
import os
import signal
import subprocess
import time

from kubeconfig import write_kubeconfig

_HERE = os.path.dirname(os.path.abspath(__file__))


class ApiServerProcess:
    def __init__(self, workdir, history=None):
        self.dir = workdir
        port_file = os.path.join(workdir, "apiserver.port")
        self.log = open(os.path.join(workdir, "apiserver.log"), "w+")
        args = ["/usr/bin/python3", os.path.join(_HERE, "apiserver.py"), "--port", "0", "--port-file", port_file]
        if history is not None:
            args += ["--history", str(history)]
        self.process = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while not (os.path.exists(port_file) and open(port_file).read().strip()):
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.log.seek(0)
                raise AssertionError("the test API server did not start:\n" + self.log.read())
            time.sleep(0.05)  # polling interval
        with open(port_file) as f:
            self.port = int(f.read())
        self.url = "http://127.0.0.1:%d" % self.port
        self.kubeconfig = write_kubeconfig(os.path.join(workdir, "kubeconfig"), self.url)
        self.env = dict(os.environ, HOME=workdir, KUBECONFIG=self.kubeconfig)

    def kubectl(self, *args, stdin=None):
        return subprocess.run(["kubectl", "--kubeconfig", self.kubeconfig, "--cache-dir",
                               os.path.join(self.dir, "cache"), "--request-timeout", "20s"] + list(args),
                              input=stdin, capture_output=True, text=True, env=self.env, timeout=60)

    def stop(self):
        """Stops the server; AssertionError when it logged a traceback."""
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=10)
        self.log.seek(0)
        text = self.log.read()
        self.log.close()
        assert "Traceback" not in text, text
