#!/usr/bin/python3
"""The full-node end-to-end check: a TrainingJob applied with the real kubectl on the
real control plane Succeeds with worker pods that the real scheduler binds to a real
kubelet (v1.36.3, with containerd, runc and a CNI bridge: tests/harness/kubelet_node.py),
its drift within bound, and its pods and Service go when it is deleted.

Not in ctest (it needs `scripts/kube-toolchain.sh --node`, a few minutes more of
building, and a host that lets containerd make network namespaces and bridges); one
command, as root, after scripts/build.sh and scripts/build-images.sh:

    scripts/kube-toolchain.sh --node && PACI_BUILD_DIR=build PACI_SOURCE_DIR=. \\
        PYTHONPATH=tests:build/python /usr/bin/python3 tests/integration/full_node_e2e.py
"""
import json
import os
import tempfile
import time
import unittest

import yaml

from harness.local_cluster import LocalCluster, wait_until
from harness.paths import BUILD, SOURCE


class FullNodeEndToEnd(unittest.TestCase):
    def test_a_trainingjob_succeeds_on_a_real_kubelet(self):
        with tempfile.TemporaryDirectory(prefix="paci-full-node-") as workdir:
            cluster = LocalCluster(workdir, BUILD, SOURCE, replicas=("operator-a",), node="kubelet")
            with cluster:
                node = cluster.get("node", cluster.plane.node_name)
                print("\n$ kubectl get nodes -o wide\n" + cluster.kubectl("get", "nodes", "-o", "wide").stdout)
                self.assertTrue(node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://"))
                self.assertEqual(node["status"]["nodeInfo"]["kubeletVersion"], "v1.36.3")
                with open(os.path.join(SOURCE, "examples", "trainingjob.yaml")) as f:
                    job = yaml.safe_load(f)
                job["spec"]["worker"]["image"] = cluster.worker_image
                job["spec"]["worker"]["imagePullPolicy"] = "Never"
                started = time.monotonic()
                cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump(job))

                def pods():
                    return json.loads(cluster.kubectl("get", "pods", "-l", "paci.dev/job-name=kjv-tiny", "-o",
                                                      "json").stdout)["items"]
                running = wait_until("both worker pods Running", lambda: (lambda p: p if len(p) == 2 and all(
                    x["status"].get("phase") == "Running" for x in p) else None)(pods()), timeout=300)
                print("$ kubectl get pods -o wide\n" + cluster.kubectl("get", "pods", "-o", "wide").stdout)
                for pod in running:
                    self.assertTrue(pod["status"]["containerStatuses"][0]["containerID"].startswith("containerd://"))
                    self.assertTrue(pod["status"]["podIP"].startswith("10.88."), pod["status"]["podIP"])
                status = wait_until("kjv-tiny Succeeded", lambda: (lambda s: s if s.get("phase") in (
                    "Succeeded", "Failed") else None)(cluster.get("trainingjob", "kjv-tiny").get("status", {})),
                    timeout=600)
                print("$ kubectl get trainingjobs -o wide\n" +
                      cluster.kubectl("get", "trainingjobs", "-o", "wide").stdout)
                print("seconds from kubectl apply to Succeeded: %.1f" % (time.monotonic() - started))
                self.assertEqual(status["phase"], "Succeeded", status)
                self.assertLessEqual(status["maxDrift"], status["driftLimit"])
                cluster.kubectl("delete", "trainingjob", "kjv-tiny", "--timeout=120s")
                wait_until("the job's pods and Service gone", lambda: not pods() and cluster.kubectl(
                    "get", "service", "kjv-tiny-workers", check=False).returncode != 0, timeout=120)
                print("after kubectl delete: no pods, no Service")


if __name__ == "__main__":
    unittest.main(verbosity=2)
