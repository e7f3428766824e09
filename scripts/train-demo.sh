#!/usr/bin/env bash
# The main job: install, build, and train a small GPT on the King James Bible
# across two worker processes with PACI, showing live progress.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
scripts/kjv-corpus.sh
mkdir -p runs
exec build/tools/pacictl train "${1:-examples/kjv-small.yaml}" --summary=runs/kjv-small-summary.json
