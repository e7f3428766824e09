#!/usr/bin/python3
"""Pod Security admission in the test API server (tests/kube/apiserver.py with
tests/kube/pod_security.py), driven by the real kubectl: namespaces labelled
`pod-security.kubernetes.io/enforce` refuse the pods a cluster would refuse,
worded as a cluster words it; `warn` labels make kubectl print the warning;
unlabelled namespaces accept anything. Also: the repository's
deploy/namespace.yaml enforces `restricted` on paci-system (the operator's own
worker pods are admitted under it in operator_e2e_test.py).

Needs no build: run by ctest with PACI_SOURCE_DIR set, or by hand from the
source tree.
"""
import json
import os
import shutil
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

SOURCE = os.path.abspath(os.environ.get("PACI_SOURCE_DIR", "."))
KUBE = os.path.join(SOURCE, "tests", "kube")
NAMESPACE_YAML = os.path.join(SOURCE, "deploy", "namespace.yaml")
PYTHON = "/usr/bin/python3"
sys.path.insert(0, KUBE)

import pod_security  # noqa: E402
from apiserver_process import ApiServerProcess  # noqa: E402

ENFORCE = "pod-security.kubernetes.io/enforce"
WARN = "pod-security.kubernetes.io/warn"

# What the real server answers for a plain pod (one container "app", nothing set)
# in a `restricted` namespace: every restricted check it fails, in the library's order.
PLAIN_RESTRICTED = (
    'violates PodSecurity "restricted:latest": '
    'allowPrivilegeEscalation != false (container "app" must set securityContext.allowPrivilegeEscalation=false), '
    'unrestricted capabilities (container "app" must set securityContext.capabilities.drop=["ALL"]), '
    'runAsNonRoot != true (pod or container "app" must set securityContext.runAsNonRoot=true), '
    'seccompProfile (pod or container "app" must set securityContext.seccompProfile.type to "RuntimeDefault" '
    'or "Localhost")')


def wait_until(predicate, timeout=10.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("timed out after %gs waiting for %s" % (timeout, what))


def namespace(name, **labels):
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}


def pod(name, ns, containers=None, init_containers=None, **spec):
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
            "spec": dict(spec, containers=containers or [{"name": "app", "image": "busybox"}])}
    if init_containers:
        body["spec"]["initContainers"] = init_containers
    return body


def restricted_container(name="app", image="busybox"):
    return {"name": name, "image": image,
            "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True,
                                "seccompProfile": {"type": "RuntimeDefault"},
                                "capabilities": {"drop": ["ALL"]}}}


class PodSecurityTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="pod-security-test-")
        cls.api = ApiServerProcess(cls.dir)
        cls.port, cls.url, cls.kubeconfig, cls.env = cls.api.port, cls.api.url, cls.api.kubeconfig, cls.api.env
        for name, labels in [("ps-restricted", {ENFORCE: "restricted"}),
                             ("ps-baseline", {ENFORCE: "baseline"}),
                             ("ps-open", {}),
                             ("ps-warn", {WARN: "restricted"}),
                             ("ps-both", {ENFORCE: "baseline", WARN: "restricted"})]:
            out = cls.kubectl_run("apply", "-f", "-", stdin=json.dumps(namespace(name, **labels)))
            assert out.returncode == 0, out.stderr

    @classmethod
    def tearDownClass(cls):
        cls.api.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    # -- helpers -------------------------------------------------------------

    @classmethod
    def kubectl_run(cls, *args, stdin=None):
        return cls.api.kubectl(*args, stdin=stdin)

    def apply(self, obj):
        """kubectl apply; returns (stdout, stderr), failing the test if kubectl fails."""
        out = self.kubectl_run("apply", "-f", "-", stdin=json.dumps(obj))
        self.assertEqual(out.returncode, 0, "kubectl apply %s: %s" % (obj["metadata"]["name"], out.stderr))
        return out.stdout, out.stderr

    def refused(self, obj):
        """kubectl apply that must fail; returns its stderr, checking the pod was not stored."""
        out = self.kubectl_run("apply", "-f", "-", stdin=json.dumps(obj))
        self.assertNotEqual(out.returncode, 0, "kubectl apply %s succeeded: %s" % (obj["metadata"]["name"],
                                                                                  out.stdout))
        if obj["kind"] == "Pod":
            self.assertEqual(self.http("GET", self.pod_path(obj))[0], 404)
        return out.stderr

    @staticmethod
    def pod_path(obj):
        return "/api/v1/namespaces/%s/pods/%s" % (obj["metadata"]["namespace"], obj["metadata"]["name"])

    def http(self, method, path, body=None, content_type="application/json"):
        """(code, body, Warning headers)."""
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Content-Type", content_type)
        req.add_header("Accept", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=20) as resp:
                return resp.status, json.loads(resp.read()), resp.headers.get_all("Warning") or []
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read()), error.headers.get_all("Warning") or []

    def expect_refusal(self, obj, detail, level="restricted:latest"):
        """kubectl prints the server's message; the Status is 403 Forbidden."""
        name = obj["metadata"]["name"]
        message = 'pods "%s" is forbidden: violates PodSecurity "%s": %s' % (name, level, detail)
        stderr = self.refused(obj)
        self.assertIn('Error from server (Forbidden): error when creating "STDIN": ' + message, stderr)
        code, status, _ = self.http("POST", "/api/v1/namespaces/%s/pods" % obj["metadata"]["namespace"], obj)
        self.assertEqual(code, 403, status)
        self.assertEqual(status, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                                  "message": message, "reason": "Forbidden", "code": 403,
                                  "details": {"name": name, "kind": "pods"}})

    # -- restricted ----------------------------------------------------------

    def test_restricted_refuses_a_plain_pod_listing_every_failed_check(self):
        plain = pod("plain", "ps-restricted")
        stderr = self.refused(plain)
        self.assertEqual(stderr.strip(), 'Error from server (Forbidden): error when creating "STDIN": '
                                         'pods "plain" is forbidden: ' + PLAIN_RESTRICTED)
        self.expect_refusal(plain, PLAIN_RESTRICTED.split(": ", 1)[1])
        # A server-side dry run is refused the same way.
        self.assertIn(PLAIN_RESTRICTED, self.kubectl_run("apply", "--dry-run=server", "-f", "-",
                                                         stdin=json.dumps(plain)).stderr)

    def test_restricted_accepts_a_pod_that_meets_it(self):
        good = pod("compliant", "ps-restricted", containers=[restricted_container()])
        stdout, stderr = self.apply(good)
        self.assertIn("pod/compliant created", stdout)
        self.assertNotIn("Warning", stderr)
        # Pod-level runAsNonRoot and seccompProfile cover containers that leave them unset; an
        # emptyDir/secret/configMap/projected volume, NET_BIND_SERVICE and a non-root uid are allowed.
        c = restricted_container("web")
        del c["securityContext"]["runAsNonRoot"], c["securityContext"]["seccompProfile"]
        c["securityContext"]["capabilities"]["add"] = ["NET_BIND_SERVICE"]
        c["securityContext"]["runAsUser"] = 65532
        pod_level = pod("pod-level", "ps-restricted", containers=[c], init_containers=[restricted_container("init")],
                        securityContext={"runAsNonRoot": True, "seccompProfile": {"type": "Localhost",
                                                                                  "localhostProfile": "p.json"}},
                        volumes=[{"name": "scratch", "emptyDir": {}}, {"name": "token", "secret": {"secretName": "t"}},
                                 {"name": "conf", "configMap": {"name": "c"}},
                                 {"name": "claim", "persistentVolumeClaim": {"claimName": "data"}},
                                 {"name": "defaulted"}])
        self.assertIn("pod/pod-level created", self.apply(pod_level)[0])

    def test_restricted_checks_pod_and_container_levels_and_init_containers(self):
        # Containers set nothing; init containers are checked too, listed first.
        two = pod("two", "ps-restricted", containers=[{"name": "main", "image": "busybox"}],
                  init_containers=[{"name": "init", "image": "busybox"}])
        self.expect_refusal(two, (
            'allowPrivilegeEscalation != false (containers "init", "main" must set '
            'securityContext.allowPrivilegeEscalation=false), '
            'unrestricted capabilities (containers "init", "main" must set securityContext.capabilities.drop=["ALL"]), '
            'runAsNonRoot != true (pod or containers "init", "main" must set securityContext.runAsNonRoot=true), '
            'seccompProfile (pod or containers "init", "main" must set securityContext.seccompProfile.type to '
            '"RuntimeDefault" or "Localhost")'))

        # A container that sets false overrides the pod's true; a pod that sets false is named itself.
        c = restricted_container()
        c["securityContext"]["runAsNonRoot"] = False
        self.expect_refusal(pod("explicit", "ps-restricted", containers=[c], securityContext={"runAsNonRoot": True}),
                            'runAsNonRoot != true (container "app" must not set securityContext.runAsNonRoot=false)')
        self.expect_refusal(pod("pod-false", "ps-restricted", containers=[restricted_container()],
                                securityContext={"runAsNonRoot": False}),
                            'runAsNonRoot != true (pod must not set securityContext.runAsNonRoot=false)')

        # runAsUser 0 at either level; seccomp Unconfined at either level; capabilities added.
        c = restricted_container()
        c["securityContext"].update(runAsUser=0, seccompProfile={"type": "Unconfined"},
                                    capabilities={"drop": ["ALL"], "add": ["SYS_ADMIN", "NET_BIND_SERVICE"]})
        self.expect_refusal(pod("root", "ps-restricted", containers=[c],
                                securityContext={"runAsUser": 0, "seccompProfile": {"type": "Unconfined"}}), (
            'unrestricted capabilities (container "app" must not include "SYS_ADMIN" in '
            'securityContext.capabilities.add), '
            'runAsUser=0 (pod and container "app" must not set runAsUser=0), '
            'seccompProfile (pod and container "app" must not set securityContext.seccompProfile.type to '
            '"Unconfined")'))

        # Volume types beyond the allowed ones; a hostPath is reported here, not as a baseline check.
        self.expect_refusal(pod("volumes", "ps-restricted", containers=[restricted_container()],
                                volumes=[{"name": "host", "hostPath": {"path": "/etc"}},
                                         {"name": "share", "nfs": {"server": "nfs", "path": "/x"}},
                                         {"name": "ok", "emptyDir": {}}]),
                            'restricted volume types (volumes "host", "share" use restricted volume types '
                            '"hostPath", "nfs")')

    # -- baseline ------------------------------------------------------------

    def test_baseline_refuses_privileged_host_path_and_host_network(self):
        privileged = pod("privileged", "ps-baseline",
                         containers=[{"name": "app", "image": "busybox", "securityContext": {"privileged": True}}])
        self.expect_refusal(privileged, 'privileged (container "app" must not set securityContext.privileged=true)',
                            "baseline:latest")
        host_path = pod("host-path", "ps-baseline", volumes=[{"name": "root", "hostPath": {"path": "/"}}])
        self.expect_refusal(host_path, 'hostPath volumes (volume "root")', "baseline:latest")
        host_network = pod("host-network", "ps-baseline", hostNetwork=True, hostPID=True)
        self.expect_refusal(host_network, "host namespaces (hostNetwork=true, hostPID=true)", "baseline:latest")
        # Everything at once, in the library's order (check IDs sorted).
        c = {"name": "app", "image": "busybox", "ports": [{"containerPort": 80, "hostPort": 8080}],
             "securityContext": {"privileged": True, "capabilities": {"add": ["NET_ADMIN", "CHOWN"]},
                                 "procMount": "Unmasked", "seccompProfile": {"type": "Unconfined"},
                                 "seLinuxOptions": {"type": "spc_t"},
                                 "appArmorProfile": {"type": "Unconfined"}}}
        everything = pod("everything", "ps-baseline", containers=[c], hostIPC=True,
                         volumes=[{"name": "a", "hostPath": {"path": "/a"}}, {"name": "b", "hostPath": {"path": "/b"}}],
                         securityContext={"sysctls": [{"name": "kernel.msgmax", "value": "1"},
                                                      {"name": "net.ipv4.tcp_syncookies", "value": "1"}],
                                          "windowsOptions": {"hostProcess": True}})
        self.expect_refusal(everything, (
            'forbidden AppArmor profile (container "app" must not set AppArmor profile type to "Unconfined"), '
            'non-default capabilities (container "app" must not include "NET_ADMIN" in '
            'securityContext.capabilities.add), '
            'host namespaces (hostIPC=true), '
            'hostPath volumes (volumes "a", "b"), '
            'hostPort (container "app" uses hostPort 8080), '
            'privileged (container "app" must not set securityContext.privileged=true), '
            'procMount (container "app" must not set securityContext.procMount to "Unmasked"), '
            'seLinuxOptions (container "app" set forbidden securityContext.seLinuxOptions: type "spc_t"), '
            'seccompProfile (container "app" must not set securityContext.seccompProfile.type to "Unconfined"), '
            'forbidden sysctls (kernel.msgmax), '
            'hostProcess (pod must not set securityContext.windowsOptions.hostProcess=true)'), "baseline:latest")

    def test_baseline_accepts_a_plain_pod(self):
        self.assertIn("pod/plain created", self.apply(pod("plain", "ps-baseline"))[0])
        # A default-set capability, a Default procMount and RuntimeDefault seccomp are baseline too.
        c = {"name": "app", "image": "busybox",
             "securityContext": {"capabilities": {"add": ["CHOWN", "NET_BIND_SERVICE"]}, "procMount": "Default",
                                 "seccompProfile": {"type": "RuntimeDefault"}}}
        self.assertIn("pod/defaults created", self.apply(pod("defaults", "ps-baseline", containers=[c]))[0])

    # -- privileged (unlabelled) and warn ------------------------------------

    def test_an_unlabelled_namespace_accepts_everything(self):
        c = {"name": "app", "image": "busybox", "ports": [{"containerPort": 80, "hostPort": 80}],
             "securityContext": {"privileged": True, "runAsUser": 0, "capabilities": {"add": ["SYS_ADMIN"]}}}
        anything = pod("anything", "ps-open", containers=[c], hostNetwork=True,
                       volumes=[{"name": "root", "hostPath": {"path": "/"}}])
        stdout, stderr = self.apply(anything)
        self.assertIn("pod/anything created", stdout)
        self.assertNotIn("Warning", stderr)
        self.assertIn("pod/plain created", self.apply(pod("plain", "default"))[0])

    def test_warn_accepts_and_kubectl_prints_the_warning(self):
        stdout, stderr = self.apply(pod("plain", "ps-warn"))
        self.assertIn("pod/plain created", stdout)
        self.assertIn("Warning: would" + PLAIN_RESTRICTED.replace("violates", " violate", 1), stderr)
        self.assertEqual(self.http("GET", "/api/v1/namespaces/ps-warn/pods/plain")[0], 200)
        # enforce baseline + warn restricted: baseline passes, restricted is warned about.
        code, _, warnings = self.http("POST", "/api/v1/namespaces/ps-both/pods", pod("plain", "ps-both"))
        self.assertEqual(code, 201)
        self.assertEqual(warnings, ['299 - "would' + PLAIN_RESTRICTED.replace("violates", " violate", 1)
                                    .replace('"', '\\"') + '"'])
        # A refused pod gets no warning, only the refusal.
        privileged = pod("privileged", "ps-both", containers=[{"name": "app", "image": "busybox",
                                                                "securityContext": {"privileged": True}}])
        code, status, warnings = self.http("POST", "/api/v1/namespaces/ps-both/pods", privileged)
        self.assertEqual((code, warnings), (403, []))
        self.assertIn('violates PodSecurity "baseline:latest": privileged', status["message"])

    # -- namespaces ----------------------------------------------------------

    def test_namespace_labels_are_validated_and_raising_a_level_warns_about_existing_pods(self):
        stderr = self.refused(namespace("ps-typo", **{ENFORCE: "strict"}))
        self.assertIn('The Namespace "ps-typo" is invalid: metadata.labels[pod-security.kubernetes.io/enforce]: '
                      'Invalid value: "strict": must be one of privileged, baseline, restricted', stderr)
        stderr = self.refused(namespace("ps-typo", **{ENFORCE: "baseline", ENFORCE + "-version": "1.30"}))
        self.assertIn('metadata.labels[pod-security.kubernetes.io/enforce-version]: Invalid value: "1.30": '
                      'must be "latest" or "v1.x"', stderr)
        self.assertEqual(self.http("GET", "/api/v1/namespaces/ps-typo")[0], 404)

        # A version label is shown as written (every version is evaluated as latest).
        self.apply(namespace("ps-versioned", **{ENFORCE: "restricted", ENFORCE + "-version": "v1.30"}))
        self.expect_refusal(pod("plain", "ps-versioned"), PLAIN_RESTRICTED.split(": ", 1)[1], "restricted:v1.30")

        # Pods made while the namespace was open stay; labelling it names them.
        self.apply(namespace("ps-later"))
        for name in ("a", "b", "c"):
            self.apply(pod(name, "ps-later"))
        self.apply(pod("good", "ps-later", containers=[restricted_container()]))
        out = self.kubectl_run("label", "namespace", "ps-later", ENFORCE + "=restricted")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("namespace/ps-later labeled", out.stdout)
        self.assertIn('Warning: existing pods in namespace "ps-later" violate the new PodSecurity enforce level '
                      '"restricted:latest"', out.stderr)
        self.assertIn("Warning: a (and 2 other pods): allowPrivilegeEscalation != false, unrestricted capabilities, "
                      "runAsNonRoot != true, seccompProfile", out.stderr)
        self.assertEqual(self.http("GET", "/api/v1/namespaces/ps-later/pods/b")[0], 200)
        # An invalid label on update is refused too; relaxing the level warns about nothing.
        out = self.kubectl_run("label", "--overwrite", "namespace", "ps-later", ENFORCE + "=strict")
        self.assertIn("Invalid value", out.stderr)
        out = self.kubectl_run("label", "--overwrite", "namespace", "ps-later", ENFORCE + "=baseline")
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertNotIn("Warning", out.stderr)

        # Updates of an existing pod are checked when they matter (an image), not otherwise (a label).
        self.apply(namespace("ps-later", **{ENFORCE: "restricted"}))
        path = "/api/v1/namespaces/ps-later/pods/a"
        _, current, _ = self.http("GET", path)
        current["metadata"].setdefault("labels", {})["touched"] = "yes"
        code, current, _ = self.http("PUT", path, current)
        self.assertEqual(code, 200, current)
        current["spec"]["containers"][0]["image"] = "busybox:2"
        code, status, _ = self.http("PUT", path, current)
        self.assertEqual(code, 403, status)
        self.assertEqual(status["message"], 'pods "a" is forbidden: ' + PLAIN_RESTRICTED)
        # The status subresource (what a kubelet writes) is never checked.
        current["spec"]["containers"][0]["image"] = "busybox"
        current["status"] = {"phase": "Running"}
        code, status, _ = self.http("PUT", path + "/status", current)
        self.assertEqual(code, 200, status)

    # -- the repository's own deployment -------------------------------------

    def test_deploy_namespace_enforces_restricted(self):
        # The operator's own worker pods are admitted there: operator_e2e_test.py runs every job
        # in a namespace that enforces restricted.
        out = self.kubectl_run("apply", "-f", NAMESPACE_YAML)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("namespace/paci-system created", out.stdout)
        _, ns, _ = self.http("GET", "/api/v1/namespaces/paci-system")
        self.assertEqual(ns["metadata"]["labels"][ENFORCE], "restricted")
        plain = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "plain", "namespace": "paci-system"},
                 "spec": {"containers": [{"name": "worker", "image": "paci-worker:latest"}]}}
        self.expect_refusal(plain, 'allowPrivilegeEscalation != false (container "worker" must set '
                                   'securityContext.allowPrivilegeEscalation=false), unrestricted capabilities '
                                   '(container "worker" must set securityContext.capabilities.drop=["ALL"]), '
                                   'runAsNonRoot != true (pod or container "worker" must set '
                                   'securityContext.runAsNonRoot=true), seccompProfile (pod or container "worker" '
                                   'must set securityContext.seccompProfile.type to "RuntimeDefault" or '
                                   '"Localhost")')


class ChecksTest(unittest.TestCase):
    """The checks module on its own, for cases kubectl adds nothing to."""

    def detail(self, level, spec, metadata=None):
        return pod_security.forbidden_detail(pod_security.evaluate(level, {"metadata": metadata or {},
                                                                           "spec": spec}))

    def test_order_is_the_librarys(self):
        self.assertEqual([f.__name__ for f in pod_security.ORDERED["restricted"]], [
            "check_app_armor_profile", "check_host_namespaces", "check_host_ports",
            "check_host_probes_and_host_lifecycle", "check_privileged", "check_proc_mount",
            "check_se_linux_options", "check_sysctls", "check_windows_host_process",
            "check_allow_privilege_escalation", "check_capabilities_restricted", "check_restricted_volumes",
            "check_run_as_non_root", "check_run_as_user", "check_seccomp_profile_restricted"])
        self.assertEqual(len(pod_security.ORDERED["baseline"]), 12)

    def test_edge_cases(self):
        windows = {"os": {"name": "windows"},
                   "securityContext": {"runAsNonRoot": True},
                   "containers": [{"name": "w", "image": "x"}]}
        self.assertEqual(self.detail("restricted", windows), "")
        self.assertEqual(self.detail("baseline", {"containers": [
            {"name": "a", "image": "x", "readinessProbe": {"httpGet": {"host": "10.0.0.1", "port": 80}}}]}),
            'probe or lifecycle host (container "a" uses probe or lifecycle host "10.0.0.1")')
        self.assertEqual(self.detail("baseline", {"securityContext": {"seLinuxOptions": {"user": "u", "role": "r"}},
                                                  "containers": [{"name": "a", "image": "x"}]}),
                         "seLinuxOptions (pod set forbidden securityContext.seLinuxOptions: user may not be set; "
                         "role may not be set)")
        self.assertEqual(self.detail("baseline", {"containers": [{"name": "a", "image": "x"}]},
                                     {"annotations": {"container.apparmor.security.beta.kubernetes.io/a": "unconfined",
                                                      "container.apparmor.security.beta.kubernetes.io/b":
                                                          "localhost/p"}}),
                         'forbidden AppArmor profile (annotation must not set AppArmor profile type to '
                         '"container.apparmor.security.beta.kubernetes.io/a="unconfined"")')
        # Malformed specs are not the admission's to reject, and must not break it.
        self.assertEqual(self.detail("baseline", {"containers": [{"name": "a", "securityContext": {
            "capabilities": "all", "seccompProfile": 3}}], "volumes": "none"}),
            'seccompProfile (container "a" must not set securityContext.seccompProfile.type to "")')


if __name__ == "__main__":
    unittest.main(verbosity=2)
