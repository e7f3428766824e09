#!/usr/bin/env bash
# Configures and builds paci into build/ (ccache when present), with the
# LibTorch of the project's Python environment (scripts/python-env.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS="${JOBS:-$(nproc)}"
scripts/python-env.sh build
if [[ ! -f build/build.ninja ]]; then
  cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
fi
cmake --build build -j "$JOBS"
