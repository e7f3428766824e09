#!/usr/bin/python3
"""Clang's thread-safety analysis over every C++ file of ours.

GCC, which builds paci, ignores the lock annotations (ABSL_GUARDED_BY,
ABSL_EXCLUSIVE_LOCKS_REQUIRED, ...). This test checks them: it runs
`clang++ -fsyntax-only -Wthread-safety -Werror=thread-safety` with each file's
own flags from the build's compile_commands.json, and fails naming every
file and line where a guarded member is touched without its lock.

It checks the files the analysis can say something about: those whose own
text, or the text of a header of ours they include (transitively), names a
lock (absl::Mutex, its lock guards, an ABSL_ lock annotation). A file with
none of these has no annotated lock to get wrong: the annotations live on the
locks and the members they guard, and clang reports nothing from system
headers (Abseil's own). That is about a third of the files, and it leaves out
most of the slow LibTorch ones.

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

    def test_every_lock_annotation_holds(self):
        self.assertIsNotNone(CLANG, "clang++ is not installed (scripts/install-deps.sh)")
        with open(os.path.join(BUILD, "compile_commands.json")) as f:
            entries = [e for e in json.load(f)
                       if os.path.abspath(BUILD) not in os.path.abspath(e["file"])]
        self.assertGreater(len(entries), 50)
        entries = [e for e in entries
                   if names_a_lock(os.path.join(e["directory"], e["file"]))]
        # The files with the most locks are among them (the selection works).
        checked = {os.path.relpath(e["file"], SOURCE) for e in entries}
        for must in ("server/job_manager.cc", "worker/runtime/stage_runtime.cc"):
            self.assertIn(must, checked)
        with ThreadPoolExecutor(os.cpu_count() or 2) as pool:
            results = list(pool.map(check, entries))
        findings = [line for _, _, lines, _ in results for line in lines]
        self.assertEqual(findings, [], "\n".join(findings))
        # Anything else clang refuses (a header it cannot read) would hide
        # findings: it must parse every file.
        broken = ["%s:\n%s" % (name, err[-2000:]) for name, rc, _, err in results if rc != 0]
        self.assertEqual(broken, [], "\n".join(broken))
        print("%d files with a lock checked" % len(results), file=sys.stderr)


if __name__ == "__main__":
    unittest.main()
