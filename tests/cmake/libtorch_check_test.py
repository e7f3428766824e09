#!/usr/bin/env python3
"""Configure refuses a LibTorch it cannot use, naming why: cmake/PaciTorch.cmake
run (through tests/cmake/libtorch_probe) against folders made to look like a
LibTorch of the wrong version, of the old libstdc++ ABI, or no LibTorch at all,
and against the project's own (PyTorch 2.11 from scripts/python-env.sh).
Run by ctest with PACI_BUILD_DIR and PACI_SOURCE_DIR.
"""
import os
import subprocess
import tempfile
import unittest

SOURCE = os.environ.get("PACI_SOURCE_DIR", os.path.dirname(os.path.dirname(
    os.path.dirname(os.path.abspath(__file__)))))
BUILD = os.environ.get("PACI_BUILD_DIR", os.path.join(SOURCE, "build"))
PROBE = os.path.join(SOURCE, "tests", "cmake", "libtorch_probe")

VERSION_H = """#pragma once
#define TORCH_VERSION_MAJOR {major}
#define TORCH_VERSION_MINOR {minor}
#define TORCH_VERSION_PATCH 0
"""

# A function taking a std::string: its mangled name carries B5cxx11 under the
# C++11 ABI and not under the old one.
LIBRARY = "#include <string>\nint paci_probe(const std::string& s) { return s.size(); }\n"


def fake_libtorch(root, major, minor, cxx11_abi=True):
    """A folder with LibTorch's layout: the version header and two libraries."""
    api = os.path.join(root, "include", "torch", "csrc", "api", "include", "torch")
    os.makedirs(api)
    os.makedirs(os.path.join(root, "lib"))
    with open(os.path.join(api, "version.h"), "w") as f:
        f.write(VERSION_H.format(major=major, minor=minor))
    source = os.path.join(root, "probe.cc")
    with open(source, "w") as f:
        f.write(LIBRARY)
    for name in ("libc10.so", "libtorch_cpu.so"):
        subprocess.run(["c++", "-shared", "-fPIC", "-D_GLIBCXX_USE_CXX11_ABI=%d" % cxx11_abi,
                        "-o", os.path.join(root, "lib", name), source], check=True)
    return root


class LibTorchCheckTest(unittest.TestCase):
    def configure(self, libtorch, entries=None):
        """cmake's exit code and output; `entries` gets the names in its torch-include."""
        with tempfile.TemporaryDirectory() as build:
            proc = subprocess.run(["cmake", "-S", PROBE, "-B", build,
                                   "-DPACI_SOURCE_DIR=" + SOURCE, "-DPACI_LIBTORCH=" + libtorch],
                                  capture_output=True, text=True)
            include = os.path.join(build, "torch-include")
            if entries is not None and os.path.isdir(include):
                entries.extend(os.listdir(include))
        return proc.returncode, proc.stdout + proc.stderr

    def test_a_libtorch_older_than_2_7_stops_configure_naming_its_version(self):
        with tempfile.TemporaryDirectory() as root:
            code, out = self.configure(fake_libtorch(root, 1, 13))
        self.assertNotEqual(code, 0, out)
        self.assertIn("LibTorch 1.13.0", out)
        self.assertIn("paci needs", out)
        self.assertIn("2.7 or newer", out)

    def test_a_libtorch_of_the_old_abi_stops_configure_naming_the_abi(self):
        with tempfile.TemporaryDirectory() as root:
            code, out = self.configure(fake_libtorch(root, 2, 11, cxx11_abi=False))
        self.assertNotEqual(code, 0, out)
        self.assertIn("old", out)
        self.assertIn("_GLIBCXX_USE_CXX11_ABI=0", out)

    def test_the_same_folder_with_the_cxx11_abi_is_accepted(self):
        with tempfile.TemporaryDirectory() as root:
            code, out = self.configure(fake_libtorch(root, 2, 11, cxx11_abi=True))
        self.assertEqual(code, 0, out)
        self.assertIn("LibTorch 2.11.0", out)

    def test_a_folder_without_libtorch_stops_configure_saying_how_to_get_one(self):
        with tempfile.TemporaryDirectory() as root:
            code, out = self.configure(os.path.join(root, "nothing-here"))
        self.assertNotEqual(code, 0, out)
        self.assertIn("No LibTorch at", out)
        self.assertIn("scripts/python-env.sh", out)

    def test_the_projects_libtorch_is_2_11_without_protobuf_headers_on_the_path(self):
        libtorch = os.path.join(BUILD, "python-env", "libtorch")
        entries = []
        code, out = self.configure(libtorch, entries)
        self.assertEqual(code, 0, out)
        self.assertIn("LibTorch 2.11.0", out)
        # The include folder the targets see: the wheel's, less google/ (protobuf 3.13).
        self.assertIn("ATen", entries)
        self.assertIn("torch", entries)
        self.assertTrue(os.path.isdir(os.path.join(os.path.realpath(libtorch), "include",
                                                   "google")))
        self.assertNotIn("google", entries)


if __name__ == "__main__":
    unittest.main()
