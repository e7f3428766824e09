#!/usr/bin/env bash
# Installs what paci builds and runs with from Debian's packages. LibTorch and
# the Python tools come from the package index, pinned, into a cache:
# scripts/python-env.sh (scripts/build.sh runs it).
# Idempotent: quick when everything is already there.
#   scripts/install-deps.sh           everything: build, tests, tools, images
#   scripts/install-deps.sh --build   only what building the binaries and the
#                                     corpus needs (the images' build stage)
set -euo pipefail

# Building: compilers, libraries, and the corpus (bible-kjv). libgloo-dev: the
# Gloo headers c10d's ProcessGroupGloo.hpp includes (LibTorch carries Gloo
# compiled in, not its headers). python3-venv: scripts/python-env.sh.
BUILD_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  python3-venv
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev prometheus-cpp-dev libcpp-httplib-dev libgoogle-glog-dev libyaml-cpp-dev zlib1g-dev
  libgtest-dev libgmock-dev googletest
  libsqlite3-dev libsentencepiece-dev libgloo-dev
  nlohmann-json3-dev libssl-dev
  bible-kjv
)
# Tests, tools and images: plots, the Python test servers, certificates (the
# test control plane's PKI), Prometheus, podman with runc and debootstrap for
# scripts/build-images.sh, and clang (with its sanitizer runtime, which clang only
# recommends, for scripts/sanitize.sh) for its thread-safety analysis of the lock
# annotations (tests/static). Kubernetes and helm are built from their Go
# modules by scripts/kube-toolchain.sh (Go: see below).
HOST_PACKAGES=(
  gnuplot-nox clang libclang-rt-14-dev
  python3-grpcio python3-protobuf python3-yaml openssl
  prometheus
  podman runc debootstrap containernetworking-plugins
)
# Go for scripts/kube-toolchain.sh: the machine's own when it has one, else Debian's
# (which fetches the newer toolchain the modules name).
if ! command -v go >/dev/null; then HOST_PACKAGES+=(golang-go); fi

case "${1:-}" in
  "") PACKAGES=("${BUILD_PACKAGES[@]}" "${HOST_PACKAGES[@]}") ;;
  --build) PACKAGES=("${BUILD_PACKAGES[@]}") ;;
  *) echo "usage: $0 [--build]" >&2; exit 2 ;;
esac

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed"; then
    missing+=("$pkg")
  fi
done

if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends \
    -o DPkg::Lock::Timeout=600 "${missing[@]}"
fi
