#!/usr/bin/env bash
# The schedule comparison of bench/schedule_comparison.py: install, build, make
# the corpus, then train every schedule and write bench/results/ (about 10
# minutes on 2 cores). Arguments go to the script, e.g. --stages 2 --steps 300.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
scripts/kjv-corpus.sh
exec /usr/bin/python3 bench/schedule_comparison.py "$@"
