#!/usr/bin/env bash
# The whole test suite: install, build, build the real Kubernetes components
# from their Go modules (scripts/kube-toolchain.sh; cached by version), build
# the container images (the node agent runs worker pods as containers of them;
# cached by content), run every test with ctest, then the unit tests under
# ASan+UBSan and the fuzzers (scripts/sanitize.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
scripts/kube-toolchain.sh build
scripts/build-images.sh --check
(cd build && ctest --output-on-failure -j "$(nproc)" --timeout 900)
scripts/sanitize.sh
