#!/usr/bin/env bash
# The whole test suite: install, build, build the container images (the test
# kubelet runs worker pods as containers of them; cached by content), run
# every test with ctest, then the unit tests under ASan+UBSan and the fuzzers
# (scripts/sanitize.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
scripts/build-images.sh --check
(cd build && ctest --output-on-failure -j "$(nproc)" --timeout 900)
scripts/sanitize.sh
