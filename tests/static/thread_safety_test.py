#!/usr/bin/python3
"""Clang's thread-safety analysis over the C++ files of ours that use LibTorch.

GCC, which builds paci, ignores the lock annotations (ABSL_GUARDED_BY,
ABSL_EXCLUSIVE_LOCKS_REQUIRED, ...). A clang build checks them, a finding an
error (cmake/PaciTargets.cmake): the sanitizer build (scripts/sanitize.sh) is
one, and it compiles every file that does not use LibTorch. The files that do
use LibTorch it leaves out; this test checks them: it runs
`clang++ -fsyntax-only -Wthread-safety -Werror=thread-safety` with each file's
own flags from the build's compile_commands.json, and fails naming every file
and line where a guarded member is touched without its lock. It also proves
that a clang build of a paci target refuses such a file.

It checks the files the analysis can say something about: those whose own
text, or the text of a header of ours they include (transitively), names a
lock (absl::Mutex, its lock guards, an ABSL_ lock annotation). A file with
none of these has no annotated lock to get wrong: the annotations live on the
locks and the members they guard, and clang reports nothing from system
headers (Abseil's own).

  PACI_BUILD_DIR=build /usr/bin/python3 tests/static/thread_safety_test.py
"""
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import unittest
from concurrent.futures import ThreadPoolExecutor

BUILD = os.environ.get("PACI_BUILD_DIR", "build")
CLANG = shutil.which("clang++") or shutil.which("clang++-14")
SOURCE = os.environ.get("PACI_SOURCE_DIR", os.getcwd())
LOCK_WORDS = re.compile(r"absl/synchronization/mutex\.h|absl::Mutex|MutexLock|CondVar|"
                        r"ABSL_[A-Z_]*(GUARDED|LOCK|REQUIRES|EXCLUDES|ACQUIRE|RELEASE|"
                        r"CAPABILITY|ASSERT)")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.MULTILINE)


def names_a_lock(path, seen=None):
    """Whether PATH, or a header of ours it includes, names a lock."""
    seen = set() if seen is None else seen
    if path in seen:
        return False
    seen.add(path)
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    if LOCK_WORDS.search(text):
        return True
    for name in INCLUDE.findall(text):
        for base in (SOURCE, os.path.dirname(path)):
            header = os.path.join(base, name)
            if os.path.isfile(header):
                if names_a_lock(os.path.abspath(header), seen):
                    return True
                break
    return False


def clang_command(entry):
    """The compile command of one entry as a clang syntax-only check."""
    args = shlex.split(entry["command"])
    while args and (os.path.basename(args[0]) in ("ccache", "c++", "g++")):
        args = args[1:]
    # GCC's precompiled <torch/torch.h> (cmake/PaciTorch.cmake) is no header
    # clang reads: its forced include goes, and each file includes what it uses.
    out, skip = [], False
    for i, arg in enumerate(args):
        if skip:
            skip = False
        elif arg in ("-o", "-MF", "-MT"):
            skip = True
        elif arg == "-include" and args[i + 1].endswith("cmake_pch.hxx"):
            skip = True
        elif arg not in ("-c", "-MD", "-Winvalid-pch"):
            out.append(arg)
    return [CLANG, "-fsyntax-only", "-Wthread-safety", "-Werror=thread-safety",
            "-Wno-unknown-warning-option"] + out


def uses_libtorch(entry):
    """Whether a compile command reads LibTorch's headers (cmake/PaciTorch.cmake)."""
    return "/torch-include" in entry["command"]


def check(entry):
    result = subprocess.run(clang_command(entry), cwd=entry["directory"], capture_output=True,
                            text=True)
    findings = [line for line in result.stderr.splitlines() if "thread-safety" in line]
    return entry["file"], result.returncode, findings, result.stderr


class ThreadSafetyTest(unittest.TestCase):
    def test_a_file_names_a_lock_through_the_headers_it_includes(self):
        with tempfile.TemporaryDirectory() as tmp:
            def write(name, text):
                os.makedirs(os.path.dirname(os.path.join(tmp, name)), exist_ok=True)
                with open(os.path.join(tmp, name), "w") as f:
                    f.write(text)
                return os.path.join(tmp, name)
            write("a/guarded.h", "int n ABSL_GUARDED_BY(mu);\n")
            write("a/plain.h", '#include "a/plain.h"\n#include <vector>\n')
            write("a/middle.h", '#include "guarded.h"\n')
            user = write("b/user.cc", '#include "a/plain.h"\n#include "a/middle.h"\n')
            plain = write("b/plain.cc", '#include "a/plain.h"\n// no locks here\n')
            global SOURCE
            saved, SOURCE = SOURCE, tmp
            try:
                self.assertTrue(names_a_lock(user))
                self.assertFalse(names_a_lock(plain))
            finally:
                SOURCE = saved

    def test_a_clang_build_refuses_a_member_touched_without_its_lock(self):
        self.assertIsNotNone(CLANG, "clang++ is not installed (scripts/install-deps.sh)")
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "CMakeLists.txt"), "w") as f:
                f.write("cmake_minimum_required(VERSION 3.20)\nproject(t CXX)\n"
                        "set(CMAKE_CXX_STANDARD 17)\n"
                        "include(%s/cmake/PaciTargets.cmake)\n"
                        "paci_cc_library(NAME racy SRCS racy.cc)\n" % SOURCE)
            with open(os.path.join(tmp, "racy.cc"), "w") as f:
                f.write('#include "absl/synchronization/mutex.h"\n'
                        "class Counter {\n public:\n  void Add() { ++n_; }\n"
                        " private:\n  absl::Mutex mu_;\n  int n_ ABSL_GUARDED_BY(mu_) = 0;\n};\n"
                        "void Use() { Counter c; c.Add(); }\n")
            build = os.path.join(tmp, "build")
            subprocess.run(["cmake", "-S", tmp, "-B", build, "-DCMAKE_CXX_COMPILER=" + CLANG],
                           check=True, capture_output=True)
            result = subprocess.run(["cmake", "--build", build], stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True)
        self.assertNotEqual(result.returncode, 0, result.stdout)
        self.assertIn("racy.cc:4", result.stdout)
        self.assertIn("[-Werror,-Wthread-safety-analysis]", result.stdout)

    def test_every_lock_annotation_holds(self):
        self.assertIsNotNone(CLANG, "clang++ is not installed (scripts/install-deps.sh)")
        with open(os.path.join(BUILD, "compile_commands.json")) as f:
            entries = [e for e in json.load(f)
                       if os.path.abspath(BUILD) not in os.path.abspath(e["file"])]
        self.assertGreater(len(entries), 50)
        entries = [e for e in entries if uses_libtorch(e)
                   and names_a_lock(os.path.join(e["directory"], e["file"]))]
        # The LibTorch files with the most locks are among them (the selection works).
        checked = {os.path.relpath(e["file"], SOURCE) for e in entries}
        for must in ("worker/runtime/stage_runtime.cc", "worker/runtime/stage_host.cc"):
            self.assertIn(must, checked)
        with ThreadPoolExecutor(os.cpu_count() or 2) as pool:
            results = list(pool.map(check, entries))
        findings = [line for _, _, lines, _ in results for line in lines]
        self.assertEqual(findings, [], "\n".join(findings))
        # Anything else clang refuses (a header it cannot read) would hide
        # findings: it must parse every file.
        broken = ["%s:\n%s" % (name, err[-2000:]) for name, rc, _, err in results if rc != 0]
        self.assertEqual(broken, [], "\n".join(broken))
        print("%d LibTorch files with a lock checked" % len(results), file=sys.stderr)


if __name__ == "__main__":
    unittest.main()
