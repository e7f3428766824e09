"""A real node for the test control plane: kubelet and containerd with runc and a
CNI bridge (Debian's containernetworking-plugins), the binaries that
`scripts/kube-toolchain.sh --node` built. Pods get addresses on the bridge
10.88.0.0/16; the host is its gateway, 10.88.0.1.

    node = KubeletNode(workdir, plane, ["localhost/paci-worker:..."]).start()
    ...
    node.stop()

What this sandbox needs beyond a plain set-up (each found by running it here):
* the host has cgroup v1 and no systemd: kubelet runs with failCgroupV1: false,
  cgroupDriver cgroupfs, no QoS cgroups; containerd's runc without systemd cgroups;
* processes here lack CAP_SYS_RESOURCE: runc cannot lower oom_score_adj (the
  kubelet asks -998 for a pod's sandbox) nor raise RLIMIT_NOFILE, and fails with
  "can't get final child's PID from pipe: EOF"; so containerd restricts
  oom_score_adj to its own (restrict_oom_score_adj, as rootless set-ups do) and its
  base runtime spec has no rlimits;
* no image registry: the pause image is made from the Kubernetes module's
  pause.c, and images are imported into containerd from podman (`podman save`,
  `ctr -n k8s.io images import`).
"""
import json
import os
import subprocess
import time

from .control_plane import NODE_NAME, stop_process

PAUSE_IMAGE = "localhost/paci-pause:3.10"
GATEWAY = "10.88.0.1"


class KubeletNode:
    def __init__(self, workdir, plane, images=(), podman_env=None):
        self.dir = os.path.join(workdir, "node")
        self.plane = plane
        self.bin = plane.bin
        self.images = list(images)
        self.podman_env = podman_env or dict(os.environ)
        self.procs = {}
        self.socket = os.path.join(self.dir, "containerd.sock")
        self.env = dict(os.environ, PATH=self.bin + ":" + os.environ.get("PATH", ""))

    def spawn(self, name, args):
        with open(os.path.join(self.dir, name + ".log"), "w") as log:
            self.procs[name] = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                                start_new_session=True, env=self.env)

    def ctr(self, *args, timeout=600):
        return subprocess.run([os.path.join(self.bin, "ctr"), "--address", self.socket, "-n", "k8s.io", *args],
                              capture_output=True, text=True, timeout=timeout, env=self.env)

    def start(self):
        """Starts containerd and the kubelet; on failure, stops what it started."""
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self):
        for tool in ("kubelet", "containerd", "containerd-shim-runc-v2", "ctr", "pause"):
            if not os.path.exists(os.path.join(self.bin, tool)):
                raise AssertionError("%s/%s is missing: run scripts/kube-toolchain.sh --node" % (self.bin, tool))
        os.makedirs(os.path.join(self.dir, "cni"), exist_ok=True)
        spec = json.loads(self.ctr("oci", "spec").stdout)
        spec["process"].pop("rlimits", None)
        with open(os.path.join(self.dir, "base-spec.json"), "w") as f:
            json.dump(spec, f)
        with open(os.path.join(self.dir, "cni", "10-paci.conflist"), "w") as f:
            json.dump({"cniVersion": "1.0.0", "name": "paci", "plugins": [
                {"type": "bridge", "bridge": "paci0", "isGateway": True, "ipMasq": False, "hairpinMode": True,
                 "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.88.0.0/16", "gateway": GATEWAY}]],
                          "routes": [{"dst": "0.0.0.0/0"}]}},
                {"type": "portmap", "capabilities": {"portMappings": True}}]}, f)
        with open(os.path.join(self.dir, "containerd.toml"), "w") as f:
            f.write('''version = 3
root = "%(d)s/containerd-root"
state = "%(d)s/containerd-state"
[grpc]
  address = "%(sock)s"
[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "%(pause)s"
[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
[plugins."io.containerd.cri.v1.runtime".cni]
  bin_dirs = ["/usr/lib/cni"]
  conf_dir = "%(d)s/cni"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
  base_runtime_spec = "%(d)s/base-spec.json"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
  BinaryName = "/usr/sbin/runc"
  SystemdCgroup = false
''' % {"d": self.dir, "sock": self.socket, "pause": PAUSE_IMAGE})
        self.spawn("containerd", [os.path.join(self.bin, "containerd"), "--config",
                                  os.path.join(self.dir, "containerd.toml")])
        deadline = time.monotonic() + 60
        while self.ctr("version").returncode != 0:
            if time.monotonic() > deadline or self.procs["containerd"].poll() is not None:
                raise AssertionError("containerd did not start; see %s/containerd.log" % self.dir)
            time.sleep(0.5)
        self.import_images()
        with open(os.path.join(self.dir, "kubelet.json"), "w") as f:
            json.dump({"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
                       "failCgroupV1": False, "cgroupDriver": "cgroupfs", "cgroupsPerQOS": False,
                       "enforceNodeAllocatable": [], "failSwapOn": False,
                       "containerRuntimeEndpoint": "unix://" + self.socket,
                       "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                                          "x509": {"clientCAFile": self.plane.ca_file}},
                       "authorization": {"mode": "Webhook"}, "readOnlyPort": 0, "port": 10250,
                       "resolvConf": "/etc/resolv.conf",
                       # The node shares the host's disk, whose free share is not the test's to
                       # keep: evict only when it is nearly full, not at kubelet's default 10 %.
                       "evictionHard": {"nodefs.available": "1Gi", "imagefs.available": "1Gi",
                                        "memory.available": "100Mi"}}, f)
        self.spawn("kubelet", [os.path.join(self.bin, "kubelet"), "--config", os.path.join(self.dir, "kubelet.json"),
                               "--kubeconfig", self.plane.kubeconfig_for("node"),
                               "--hostname-override=" + NODE_NAME, "--root-dir", os.path.join(self.dir, "kubelet"),
                               "--cert-dir", os.path.join(self.dir, "kubelet-pki"), "--v=1"])
        return self

    def import_images(self):
        pause_root = os.path.join(self.dir, "pause-root")
        os.makedirs(pause_root, exist_ok=True)
        subprocess.run(["cp", os.path.join(self.bin, "pause"), pause_root], check=True)
        tar = subprocess.run(["tar", "-C", pause_root, "-c", "pause"], capture_output=True, check=True).stdout
        subprocess.run(["podman", "import", "--change", 'ENTRYPOINT ["/pause"]', "-", PAUSE_IMAGE], input=tar,
                       capture_output=True, check=True, env=self.podman_env)
        for image in [PAUSE_IMAGE] + self.images:
            archive = os.path.join(self.dir, "image.tar")
            if os.path.exists(archive):
                os.remove(archive)
            subprocess.run(["podman", "save", "--format", "docker-archive", "-o", archive, image],
                           capture_output=True, check=True, env=self.podman_env, timeout=600)
            out = self.ctr("images", "import", archive)
            os.remove(archive)
            if out.returncode != 0:
                raise AssertionError("ctr images import %s: %s" % (image, out.stderr))

    def stop(self):
        stop_process(self.procs.get("kubelet"), timeout=30)
        if self.procs.get("containerd") and self.procs["containerd"].poll() is None:
            for task in self.ctr("tasks", "ls", "-q").stdout.split():
                self.ctr("tasks", "kill", "--signal", "SIGKILL", task)
        stop_process(self.procs.get("containerd"), timeout=30)
        # The pods' processes: containerd's shims outlive it by design.
        subprocess.run(["pkill", "-f", "containerd-shim-runc-v2 -namespace k8s.io -id .* -address " + self.socket],
                       capture_output=True)
        # What the kubelet and containerd mounted (volumes, root file systems, network namespaces).
        for _ in range(5):  # mounts may be stacked
            with open("/proc/mounts") as f:
                mounts = [line.split()[1] for line in f if line.split()[1].startswith(self.dir + "/")]
            if not mounts:
                break
            for mount in sorted(mounts, key=len, reverse=True):
                subprocess.run(["umount", "-l", mount], capture_output=True)
