"""Real nodes for the test control plane: a kubelet and its own containerd (with
runc and a CNI bridge from Debian's containernetworking-plugins) per Node, the
binaries that `scripts/kube-toolchain.sh --node` built. Node i's pods get
addresses on its bridge paci<i>, 10.88.<i>.0/24, whose gateway 10.88.<i>.1 is
the host; the host routes between the bridges (ip_forward), so a pod reaches a
pod of the other Node through the host, as through a cluster's pod network.

    node = KubeletNode(workdir, plane, 0, ["localhost/paci-worker:..."]).start()
    ...
    node.stop()

Two Nodes on one host share its address (their InternalIP) and tell apart by
name (paci-node, paci-node-2), kubelet port (10250, 10251), containerd socket,
root, bridge and subnet. Each advertises 2 cpu and 8 GiB (systemReserved takes
the rest of the host), so what fits on a Node is the same on every machine.

What this sandbox needs beyond a plain set-up (each found by running it here):
* the host has cgroup v1 and no systemd: kubelet runs with failCgroupV1: false,
  cgroupDriver cgroupfs, no QoS cgroups; containerd's runc without systemd cgroups;
* processes here lack CAP_SYS_RESOURCE: runc cannot lower oom_score_adj (the
  kubelet asks -998 for a pod's sandbox) nor raise RLIMIT_NOFILE, and fails with
  "can't get final child's PID from pipe: EOF"; so containerd restricts
  oom_score_adj to its own (restrict_oom_score_adj, as rootless set-ups do) and its
  base runtime spec has no rlimits;
* two Nodes on one host: each has its own pod log folder (podLogsDir), since a
  kubelet deletes the logs of every pod in its folder that it does not run;
* no image registry: the pause image is made from the Kubernetes module's
  pause.c, and images are imported into containerd from podman (`podman save`,
  `ctr -n k8s.io images import`). containerd's root (its content and unpacked
  snapshots) and state are kept between runs in the cache folder, one per Node, so
  an image is imported once per content (the worker image's tag is its content
  hash), and the kubelet's image garbage collection is off (no registry would bring
  a collected image back); containers never outlive a run there: they are removed at stop, and at
  the next start after a run that was killed.
"""
import fcntl
import json
import os
import subprocess

from .control_plane import NODE_NAMES, _die_with_parent, stop_process, wait_until

PAUSE_IMAGE = "localhost/paci-pause:3.10"
GATEWAY = "10.88.0.1"
LOCK_DIR = "/run/lock" if os.path.isdir("/run/lock") else "/tmp"  # the host on the first Node's bridge: where pods reach host processes
ALLOCATABLE_CPU = 2
ALLOCATABLE_MEMORY_MI = 8192
EVICTION_MEMORY_MI = 100


def _cache_root():
    return os.path.join(os.environ.get("PACI_CACHE_DIR") or os.path.join(
        os.environ.get("HOME") or "/root", ".cache", "paci"), "containerd")


def _reserved():
    """systemReserved that leaves ALLOCATABLE_* of this host (kubelet: allocatable =
    capacity - reserved - hard eviction)."""
    with open("/proc/meminfo") as f:
        total_ki = int(next(line for line in f if line.startswith("MemTotal:")).split()[1])
    memory_mi = total_ki // 1024 - ALLOCATABLE_MEMORY_MI - EVICTION_MEMORY_MI
    cpu = os.cpu_count() - ALLOCATABLE_CPU
    if memory_mi < 0 or cpu < 0:
        raise AssertionError("a test Node advertises %d cpu and %d MiB: this host has %d cpu and %d MiB" % (
            ALLOCATABLE_CPU, ALLOCATABLE_MEMORY_MI, os.cpu_count(), total_ki // 1024))
    reserved = {"memory": "%dMi" % memory_mi} if memory_mi else {}
    if cpu:
        reserved["cpu"] = str(cpu)
    return reserved


def _ip(*args):
    return subprocess.run(["ip", *args], capture_output=True, text=True)


class KubeletNode:
    def __init__(self, workdir, plane, index=0, images=(), podman_env=None, aliases=None):
        """images: podman's images to import; aliases: {name: image of `images`}, more names
        for them in containerd (as `kind load docker-image` gives an image its name on the
        nodes), set again at each start."""
        self.index = index
        self.name = NODE_NAMES[index]
        self.dir = os.path.join(workdir, self.name)
        self.plane = plane
        self.bin = plane.bin
        self.images = list(images)
        self.aliases = dict(aliases or {})
        self.podman_env = podman_env or dict(os.environ)
        self.procs = {}
        # containerd's root (content, snapshots) and state (tasks, shims' bundles, network
        # namespaces) kept between runs: a run killed before its stop() leaves containers
        # the next containerd of this Node finds again, and removes.
        self.root = os.path.join(_cache_root(), self.name, "root")
        self.state = os.path.join(_cache_root(), self.name, "state")
        self.socket = os.path.join(self.dir, "containerd.sock")
        self.bridge = "paci%d" % index
        self.gateway = "10.88.%d.1" % index
        self.subnet = "10.88.%d.0/24" % index
        self.port = 10250 + index
        self.env = dict(os.environ, PATH=self.bin + ":" + os.environ.get("PATH", ""))
        self._lock = None

    def spawn(self, name, args):
        with open(os.path.join(self.dir, name + ".log"), "w") as log:
            self.procs[name] = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT,
                                                start_new_session=True, env=self.env,
                                                preexec_fn=_die_with_parent)

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
        os.makedirs(os.path.join(self.dir, "pod-logs"), exist_ok=True)
        os.makedirs(self.root, exist_ok=True)
        # What a Node holds of this host (its bridge and subnet, its kubelet port, its containerd
        # root and state, and for the first Node kube-router's rules) is one run's at a time.
        lock = open(os.path.join(LOCK_DIR, "paci-test-%s.lock" % self.name), "w")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise AssertionError("another test cluster on this host runs Node %s (%s/paci-test-%s.lock)" % (
                self.name, LOCK_DIR, self.name)) from None
        self._lock = lock
        self.make_bridge()
        spec = json.loads(subprocess.run([os.path.join(self.bin, "ctr"), "oci", "spec"], capture_output=True,
                                         text=True, check=True).stdout)
        spec["process"].pop("rlimits", None)
        with open(os.path.join(self.dir, "base-spec.json"), "w") as f:
            json.dump(spec, f)
        with open(os.path.join(self.dir, "cni", "10-paci.conflist"), "w") as f:
            json.dump({"cniVersion": "1.0.0", "name": self.bridge, "plugins": [
                {"type": "bridge", "bridge": self.bridge, "isGateway": True, "ipMasq": False, "hairpinMode": True,
                 "ipam": {"type": "host-local", "dataDir": os.path.join(self.dir, "ipam"),
                          "ranges": [[{"subnet": self.subnet, "gateway": self.gateway}]],
                          "routes": [{"dst": "0.0.0.0/0"}]}},
                {"type": "portmap", "capabilities": {"portMappings": True}}]}, f)
        with open(os.path.join(self.dir, "containerd.toml"), "w") as f:
            f.write('''version = 3
root = "%(root)s"
state = "%(state)s"
[grpc]
  address = "%(sock)s"
[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "%(pause)s"
[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
[plugins."io.containerd.cri.v1.runtime".cni]
  bin_dirs = ["/usr/lib/cni"]
  conf_dir = "%(d)s/cni"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
  base_runtime_spec = "%(d)s/base-spec.json"
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
  BinaryName = "/usr/sbin/runc"
  SystemdCgroup = false
''' % {"root": self.root, "state": self.state, "d": self.dir, "sock": self.socket, "pause": PAUSE_IMAGE})
        self.spawn("containerd", [os.path.join(self.bin, "containerd"), "--config",
                                  os.path.join(self.dir, "containerd.toml")])
        wait_until("containerd serving (see %s/containerd.log)" % self.dir, lambda: self.alive("containerd")
                   and self.ctr("version").returncode == 0, timeout=60)
        self.remove_containers()
        self.import_images()
        with open(os.path.join(self.dir, "kubelet.json"), "w") as f:
            json.dump({"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
                       "failCgroupV1": False, "cgroupDriver": "cgroupfs", "cgroupsPerQOS": False,
                       "enforceNodeAllocatable": [], "failSwapOn": False,
                       "containerRuntimeEndpoint": "unix://" + self.socket,
                       "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                                          "x509": {"clientCAFile": self.plane.ca_file}},
                       "authorization": {"mode": "Webhook"}, "readOnlyPort": 0, "port": self.port,
                       "healthzPort": 0, "resolvConf": "/etc/resolv.conf",
                       # Its own pods' log folder: a kubelet's container GC deletes every
                       # folder of /var/log/pods (the default) whose pod it does not run, so
                       # two Nodes sharing it deleted each other's pods' logs, a minute apart.
                       "podLogsDir": os.path.join(self.dir, "pod-logs"),
                       "systemReserved": _reserved(),
                       # The node shares the host's disk, whose free share is not the test's to
                       # keep: evict only when it is nearly full, not at kubelet's default 10 %.
                       "evictionHard": {"nodefs.available": "1Gi", "imagefs.available": "1Gi",
                                        "memory.available": "%dMi" % EVICTION_MEMORY_MI},
                       # Nor collect images: at kubelet's default (85 % of the disk used) it
                       # deletes every image no container uses, such as the coordinator's,
                       # imported at start and first run minutes later, and no registry here
                       # could bring it back. 100 turns image collection off.
                       "imageGCHighThresholdPercent": 100}, f)
        self.spawn("kubelet", [os.path.join(self.bin, "kubelet"), "--config", os.path.join(self.dir, "kubelet.json"),
                               "--kubeconfig", self.plane.kubeconfig_for(self.name),
                               "--hostname-override=" + self.name, "--root-dir", os.path.join(self.dir, "kubelet"),
                               "--cert-dir", os.path.join(self.dir, "kubelet-pki"), "--v=1"])
        return self

    def make_bridge(self):
        """The Node's bridge with the gateway's address, made before any pod so that the host
        answers there from the start (the CNI bridge plugin takes a bridge that exists);
        and the host routing between the Nodes' bridges."""
        _ip("link", "del", self.bridge)  # one a killed run left
        for args in (("link", "add", self.bridge, "type", "bridge"),
                     ("addr", "add", self.gateway + "/24", "dev", self.bridge),
                     ("link", "set", self.bridge, "up")):
            out = _ip(*args)
            if out.returncode != 0:
                raise AssertionError("ip %s: %s" % (" ".join(args), out.stderr.strip()))
        with open("/proc/sys/net/ipv4/ip_forward", "w") as f:
            f.write("1")

    def import_images(self):
        """The pause image and self.images into containerd, each unless its root has it."""
        have = set(self.ctr("images", "ls", "-q").stdout.split())
        if PAUSE_IMAGE not in have:
            pause_root = os.path.join(self.dir, "pause-root")
            os.makedirs(pause_root, exist_ok=True)
            subprocess.run(["cp", os.path.join(self.bin, "pause"), pause_root], check=True)
            tar = subprocess.run(["tar", "-C", pause_root, "-c", "pause"], capture_output=True, check=True).stdout
            subprocess.run(["podman", "import", "--change", 'ENTRYPOINT ["/pause"]', "-", PAUSE_IMAGE], input=tar,
                           capture_output=True, check=True, env=self.podman_env)
        for image in [PAUSE_IMAGE] + self.images:
            if image in have:
                continue
            archive = os.path.join(self.dir, "image.tar")
            if os.path.exists(archive):
                os.remove(archive)
            subprocess.run(["podman", "save", "--format", "docker-archive", "-o", archive, image],
                           capture_output=True, check=True, env=self.podman_env, timeout=600)
            out = self.ctr("images", "import", archive)
            os.remove(archive)
            if out.returncode != 0:
                raise AssertionError("ctr images import %s: %s" % (image, out.stderr))
        for alias, image in self.aliases.items():
            out = self.ctr("images", "tag", "--force", image, alias)
            if out.returncode != 0:
                raise AssertionError("ctr images tag %s %s: %s" % (image, alias, out.stderr))

    def kill_container(self, container_id):
        """SIGKILL of a container of this Node's pods ("containerd://ID", as a pod's status has it),
        through containerd, as an out-of-memory kill or a crash would end it."""
        out = self.ctr("tasks", "kill", "--signal", "SIGKILL", container_id.split("://", 1)[-1])
        if out.returncode != 0:
            raise AssertionError("ctr tasks kill %s: %s" % (container_id, out.stderr))

    def alive(self, name):
        """True while the process `name` runs; AssertionError naming its log once it has exited."""
        if self.procs[name].poll() is not None:
            raise AssertionError("%s exited with %s; see %s/%s.log" % (
                name, self.procs[name].returncode, self.dir, name))
        return True

    def remove_containers(self):
        """Kills and removes every container of the root (a run's pods never outlive it):
        `tasks delete --force` kills a task and returns once it has exited."""
        for container in self.ctr("containers", "ls", "-q").stdout.split():
            self.ctr("tasks", "delete", "--force", container)
            self.ctr("containers", "delete", container)

    def stop(self):
        """Stops the kubelet and containerd with every container of the Node, as a machine that
        goes down; removes its bridge."""
        stop_process(self.procs.get("kubelet"), timeout=30)
        if self.procs.get("containerd") and self.procs["containerd"].poll() is None:
            self.remove_containers()
        stop_process(self.procs.get("containerd"), timeout=30)
        # The pods' processes: containerd's shims outlive it by design.
        subprocess.run(["pkill", "-f", "containerd-shim-runc-v2 -namespace k8s.io -id .* -address " + self.socket],
                       capture_output=True)
        # What the kubelet and containerd mounted (volumes, root file systems, network namespaces):
        # under containerd's root only while this run holds it (another run's pods may be there).
        ours = (self.dir + "/", self.root + "/", self.state + "/") if self._lock is not None else (self.dir + "/",)
        for _ in range(5):  # mounts may be stacked
            with open("/proc/mounts") as f:
                mounts = [line.split()[1] for line in f if line.split()[1].startswith(ours)]
            if not mounts:
                break
            for mount in sorted(mounts, key=len, reverse=True):
                subprocess.run(["umount", "-l", mount], capture_output=True)
        if self._lock is not None:
            _ip("link", "del", self.bridge)
            self._lock.close()
            self._lock = None


def make_local_volumes(plane, folder, nodes, count=24):
    """`count` PersistentVolumes of the `local` kind, each a folder of `folder` (root's, 0755)
    that every Node in `nodes` has (they share this host's disk), with no StorageClass: a claim
    that names none binds one of them, as a cluster's pre-made volumes are bound. Unlike a
    hostPath volume, the local volume plugin gives a pod's fsGroup the folder."""
    volumes = []
    for i in range(count):
        path = os.path.join(folder, "local-%02d" % i)
        os.makedirs(path, mode=0o755, exist_ok=True)
        volumes.append({
            "apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "local-%02d" % i},
            "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce", "ReadWriteMany"],
                     "persistentVolumeReclaimPolicy": "Retain", "volumeMode": "Filesystem",
                     "local": {"path": path},
                     "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [{
                         "key": "kubernetes.io/hostname", "operator": "In", "values": list(nodes)}]}]}}}})
    plane.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": volumes}))


def claim_path(plane, namespace, claim):
    """The host folder of the local volume bound to a PersistentVolumeClaim."""
    volume = json.loads(plane.kubectl("get", "pvc", claim, "-n", namespace, "-o", "json").stdout)["spec"]["volumeName"]
    return json.loads(plane.kubectl("get", "pv", volume, "-o", "json").stdout)["spec"]["local"]["path"]
