"""paci's test harness: what the integration tests (tests/integration) and the
benchmarks (bench/) start and drive, and no test of its own.

    paths          where the build and the sources are (PACI_BUILD_DIR, PACI_SOURCE_DIR)
                   and the binaries and corpus in them
    coordinator    a coordinator and workers on loopback, driven through the
                   generated stubs (Cluster, spec, phase)
    pipeline       one `pacictl train` run (Run, spec_text)
    monitoring     a real Prometheus, the dashboards' queries, promtool
    control_plane  the real Kubernetes control plane on 127.0.0.1
    fault_proxy    a fault-injecting proxy in front of its API server
    kubelet_node   real Nodes: a kubelet with containerd each, local volumes
    kube_router    kube-router's NetworkPolicy controller on the Nodes
    local_cluster  a whole paci cluster on the control plane
    pki            certificates for mutual TLS, its flags and the worker Secret

Import it with tests/ on the module path (ctest sets PYTHONPATH to tests/ and
BUILD/python, where the paci.v1 stubs are generated; bench/_paths.py does the same
for the benchmarks): `from harness.local_cluster import LocalCluster`. One module
also runs as a program under /usr/bin/python3, by path: control_plane.py (started
by kube/test_api_server.h).
"""
