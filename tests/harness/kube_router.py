"""NetworkPolicy enforced on the test Nodes by a real network plugin: kube-router's
network policy controller (github.com/cloudnativelabs/kube-router, the release
scripts/kube-toolchain.sh --node builds), its firewall alone (no routing, no
service proxy: the host routes between the Nodes' bridges).

    router = KubeRouter(workdir, plane, "paci-node").start()   # the host's filter table is its
    ...
    router.stop()                                              # and is given back clean

One instance serves both test Nodes: they share this host's address, and kube-router
takes as its own every pod whose hostIP is its Node's address. It writes the
host's iptables filter table (chains KUBE-ROUTER-*, KUBE-POD-FW-*, KUBE-NWPLCY-*)
and ipsets (KUBE-SRC-*, KUBE-DST-*, kube-router-*), catching bridged pod traffic
with `physdev --physdev-is-bridged`; so it runs only while a test asks for it, and
stop() removes every chain, rule and set it made (not `--cleanup-config`, which also
tears down the routing and proxy state it never made here). It admits a pod's
traffic from its own Node's addresses, as it must for the kubelet's probes: host
processes (the test's coordinator and operators) are not fenced.

Uses the standard library, iptables and ipset.
"""
import os
import shlex
import subprocess

from .control_plane import _die_with_parent, stop_process, wait_until

CHAIN_PREFIXES = ("KUBE-ROUTER-", "KUBE-POD-FW-", "KUBE-NWPLCY-")
SET_PREFIXES = ("KUBE-SRC-", "KUBE-DST-", "kube-router-")


def _run(*args):
    """The command's CompletedProcess; exit status 127 when it is not installed."""
    try:
        return subprocess.run(list(args), capture_output=True, text=True)
    except FileNotFoundError as error:
        return subprocess.CompletedProcess(list(args), 127, "", str(error))


class KubeRouter:
    def __init__(self, workdir, plane, node_name, service_range="10.96.0.0/16"):
        self.dir = workdir
        self.plane = plane
        self.node_name = node_name
        self.service_range = service_range
        self.proc = None

    def start(self):
        """Starts kube-router; returns once its chains are in the filter table."""
        binary = os.path.join(self.plane.bin, "kube-router")
        if not os.path.exists(binary):
            raise AssertionError("%s is missing: run scripts/kube-toolchain.sh --node" % binary)
        for tool in ("iptables", "ipset"):
            if _run("sh", "-c", "command -v " + tool).returncode != 0:
                raise AssertionError("kube-router needs %s (scripts/install-deps.sh installs it)" % tool)
        self.clean()  # what a killed run left
        # Bridged pod traffic must pass the filter table (kube-router sets this only in its routing
        # controller, which does not run here).
        path = "/proc/sys/net/bridge/bridge-nf-call-iptables"
        if not os.path.exists(path):
            _run("modprobe", "br_netfilter")
        try:
            with open(path, "w") as f:
                f.write("1")
        except OSError as error:
            raise AssertionError("kube-router needs bridged traffic in iptables (%s): %s" % (path, error))
        with open(os.path.join(self.dir, "kube-router.log"), "w") as log:
            self.proc = subprocess.Popen(
                [binary, "--kubeconfig=" + self.plane.kubeconfig, "--hostname-override=" + self.node_name,
                 "--run-firewall=true", "--run-router=false", "--run-service-proxy=false",
                 "--service-cluster-ip-range=" + self.service_range, "--health-port=0", "--metrics-port=0",
                 "--v=1"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=_die_with_parent)
        try:
            wait_until("kube-router's chains (see %s/kube-router.log)" % self.dir, lambda: self.alive()
                       and "KUBE-ROUTER-FORWARD" in self.chains(), timeout=60)
        except AssertionError:
            self.stop()
            raise
        return self

    def alive(self):
        """True while kube-router runs; AssertionError with its log's end once it has exited."""
        if self.proc.poll() is not None:
            with open(os.path.join(self.dir, "kube-router.log"), errors="replace") as f:
                raise AssertionError("kube-router exited with %s:\n%s" % (
                    self.proc.returncode, "".join(f.readlines()[-20:])))
        return True

    @staticmethod
    def chains():
        """The filter table's chains kube-router made."""
        out = _run("iptables", "-t", "filter", "-S").stdout
        return {line.split()[1] for line in out.splitlines()
                if line.startswith("-N ") and line.split()[1].startswith(CHAIN_PREFIXES)}

    def pod_chains(self):
        """The per-pod firewall chains: one for each pod a policy selects, once it is synced."""
        return {c for c in self.chains() if c.startswith("KUBE-POD-FW-")}

    @staticmethod
    def leftovers():
        """What of kube-router the host still has: filter rules or chains naming its chains, and
        its ipsets (empty once stop() or clean() ran)."""
        rules = [line for line in _run("iptables", "-t", "filter", "-S").stdout.splitlines()
                 if any(prefix in line for prefix in CHAIN_PREFIXES)]
        sets = [name for name in _run("ipset", "list", "-n").stdout.split() if name.startswith(SET_PREFIXES)]
        return rules + sets

    @classmethod
    def clean(cls):
        """Removes kube-router's rules, chains and sets from the host."""
        rules = _run("iptables", "-t", "filter", "-S").stdout.splitlines()
        chains = cls.chains()
        for rule in rules:  # the jumps from the built-in chains into its own
            parts = shlex.split(rule)
            if parts[0] == "-A" and not parts[1].startswith(CHAIN_PREFIXES) and any(
                    p in chains for p in parts[2:]):
                _run("iptables", "-t", "filter", "-D", *parts[1:])
        for chain in chains:
            _run("iptables", "-t", "filter", "-F", chain)
        for chain in chains:
            _run("iptables", "-t", "filter", "-X", chain)
        for _ in range(2):  # a list set goes before the sets it names
            for name in _run("ipset", "list", "-n").stdout.split():
                if name.startswith(SET_PREFIXES):
                    _run("ipset", "destroy", name)

    def stop(self):
        stop_process(self.proc, timeout=10)
        self.clean()
