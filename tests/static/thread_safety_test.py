#!/usr/bin/python3
"""Clang's thread-safety analysis over every C++ file of ours.

GCC, which builds paci, ignores the lock annotations (ABSL_GUARDED_BY,
ABSL_EXCLUSIVE_LOCKS_REQUIRED, ...). This test checks them: it runs
`clang++ -fsyntax-only -Wthread-safety -Werror=thread-safety` with each file's
own flags from the build's compile_commands.json, and fails naming every
file and line where a guarded member is touched without its lock.

  PACI_BUILD_DIR=build /usr/bin/python3 tests/static/thread_safety_test.py
"""
import json
import os
import shlex
import shutil
import subprocess
import sys
import unittest
from concurrent.futures import ThreadPoolExecutor

BUILD = os.environ.get("PACI_BUILD_DIR", "build")
CLANG = shutil.which("clang++") or shutil.which("clang++-14")


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


def check(entry):
    result = subprocess.run(clang_command(entry), cwd=entry["directory"], capture_output=True,
                            text=True)
    findings = [line for line in result.stderr.splitlines() if "thread-safety" in line]
    return entry["file"], result.returncode, findings, result.stderr


class ThreadSafetyTest(unittest.TestCase):
    def test_every_lock_annotation_holds(self):
        self.assertIsNotNone(CLANG, "clang++ is not installed (scripts/install-deps.sh)")
        with open(os.path.join(BUILD, "compile_commands.json")) as f:
            entries = [e for e in json.load(f)
                       if os.path.abspath(BUILD) not in os.path.abspath(e["file"])]
        self.assertGreater(len(entries), 50)
        with ThreadPoolExecutor(os.cpu_count() or 2) as pool:
            results = list(pool.map(check, entries))
        findings = [line for _, _, lines, _ in results for line in lines]
        self.assertEqual(findings, [], "\n".join(findings))
        # Anything else clang refuses (a header it cannot read) would hide
        # findings: it must parse every file.
        broken = ["%s:\n%s" % (name, err[-2000:]) for name, rc, _, err in results if rc != 0]
        self.assertEqual(broken, [], "\n".join(broken))
        print("%d files checked" % len(results), file=sys.stderr)


if __name__ == "__main__":
    unittest.main()
