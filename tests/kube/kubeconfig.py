#!/usr/bin/python3
"""Writes a standard kubeconfig for the test API server (plain HTTP, dummy token):
clusters[].cluster.server, users[].user.token, contexts[].context{cluster, user,
namespace}, current-context. kubectl and the operator's client both read it.

    from kubeconfig import write_kubeconfig
    write_kubeconfig(path, "http://127.0.0.1:PORT")

or: /usr/bin/python3 tests/kube/kubeconfig.py PATH SERVER_URL
"""
import json
import os
import sys


def write_kubeconfig(path, server_url, namespace="default", token="test-token", name="paci-test"):
    """Writes the kubeconfig (block-style YAML) to `path`, mode 0600; returns `path`."""
    q = json.dumps  # a JSON string is a YAML double-quoted scalar
    text = "\n".join([
        "apiVersion: v1",
        "kind: Config",
        "clusters:",
        "- name: %s" % q(name),
        "  cluster:",
        "    server: %s" % q(server_url),
        "users:",
        "- name: %s" % q(name),
        "  user:",
        "    token: %s" % q(token),
        "contexts:",
        "- name: %s" % q(name),
        "  context:",
        "    cluster: %s" % q(name),
        "    user: %s" % q(name),
        "    namespace: %s" % q(namespace),
        "current-context: %s" % q(name),
        "preferences: {}",
        "",
    ])
    tmp = path + ".tmp"
    with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
        f.write(text)
    os.replace(tmp, path)
    return path


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: kubeconfig.py PATH SERVER_URL")
    write_kubeconfig(sys.argv[1], sys.argv[2])
