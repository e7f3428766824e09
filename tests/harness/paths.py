"""Where the tests find the build and the sources: PACI_BUILD_DIR and
PACI_SOURCE_DIR (ctest sets both), else build/ and the current folder; and the
binaries and the corpus in them. Absolute, so that processes started elsewhere
find them too."""
import os

BUILD = os.path.abspath(os.environ.get("PACI_BUILD_DIR", "build"))
SOURCE = os.path.abspath(os.environ.get("PACI_SOURCE_DIR", "."))

COORDINATOR = os.path.join(BUILD, "server", "paci_coordinator")
WORKER = os.path.join(BUILD, "worker", "paci_worker")
PACICTL = os.path.join(BUILD, "tools", "pacictl")
CORPUS = os.path.join(SOURCE, "tests", "data", "kjv-genesis.txt")
