#!/usr/bin/env bash
# The whole test suite: install, build, build the real Kubernetes components
# from their Go modules (scripts/kube-toolchain.sh; cached by version), build
# the container images (the test Nodes' kubelets run worker pods as containers
# of them; cached by content), run every test with ctest, then the unit tests under
# ASan+UBSan and the fuzzers (scripts/sanitize.sh).
#
# From a fresh machine two builds run beside the others, to fill what those
# leave idle on two cores (downloads, links, containers starting, tests
# waiting on their processes): the Go builds of the Kubernetes components
# beside the C++ build and the images, and the sanitizer build (clang, build-asan/), at the
# lowest CPU priority, from the end of the C++ build to the end of ctest. (The
# priority holds against processes of this session, not against the image
# build's containers, which run in cgroups of their own: during the images it
# takes about half the CPU. Measured from a fresh machine: 35 minutes; from
# empty caches on a slower one, 57 to 66: docs/contributing.md.)
# Their output goes to build/kube-toolchain.log and build-asan/background-build.log.
set -euo pipefail
cd "$(dirname "$0")/.."
BACKGROUND=()
trap 'for pid in "${BACKGROUND[@]}"; do kill -- -"$pid" 2>/dev/null || true; done' EXIT
background() {  # background LOG COMMAND...: in a process group of its own
  local log=$1
  shift
  mkdir -p "$(dirname "$log")"
  setsid "$@" > "$log" 2>&1 &
  BACKGROUND+=("$!")
  echo "test: started $* (output: $log)"
}
finish() {  # finish PID LOG NAME: waits for a background step; shows its log if it failed
  if ! wait "$1"; then
    tail -60 "$2"
    echo "test: $3 failed (whole output: $2)" >&2
    exit 1
  fi
  tail -1 "$2"
}

scripts/install-deps.sh
background build/kube-toolchain.log scripts/kube-toolchain.sh --node build
kube=$!
scripts/build.sh
background build-asan/background-build.log nice -n 19 scripts/sanitize.sh --build
sanitize_build=$!
scripts/build-images.sh --check
finish "$kube" build/kube-toolchain.log "scripts/kube-toolchain.sh build"
(cd build && ctest --output-on-failure -j "$(nproc)" --timeout 900)
echo "test: waiting for the sanitizer build"
finish "$sanitize_build" build-asan/background-build.log "the sanitizer build"
scripts/sanitize.sh
