"""What a benchmark imports first, so that it runs by path with no PYTHONPATH
(`build/python-env/bin/python bench/NAME.py`): ROOT, the repository; tests/ put on
the module path once, for the test harness (`from harness.local_cluster import
LocalCluster`); and use_build(build), which puts BUILD/python, where the build
generates the paci.v1 stubs, there too (the build folder is each benchmark's
--build)."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _prepend(path):
    if path not in sys.path:
        sys.path.insert(0, path)


_prepend(os.path.join(ROOT, "tests"))


def use_build(build):
    """Puts BUILD/python (the generated paci.v1 stubs) on the module path."""
    _prepend(os.path.join(os.path.abspath(build), "python"))
