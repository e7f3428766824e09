#!/usr/bin/env bash
# Installs what paci builds and runs with from Debian's packages. LibTorch and
# the Python tools come from the package index, pinned, into a cache:
# scripts/python-env.sh (scripts/build.sh runs it). Rust (cargo) builds
# Hugging Face's tokenizers crate: the machine's own (rustup's, also when
# ~/.cargo/bin is not on PATH), else the pinned RUST_TOOLCHAIN through rustup.
# Idempotent: quick when everything is already there.
#   scripts/install-deps.sh           everything: build, tests, tools, images
#   scripts/install-deps.sh --build   only what building the binaries and the
#                                     corpus needs (the images' build stage)
set -euo pipefail

# Building: compilers, libraries, and the corpus (bible-kjv). libgloo-dev: the
# Gloo headers c10d's ProcessGroupGloo.hpp includes (LibTorch carries Gloo
# compiled in, not its headers). libgoogle-perftools-dev: the worker's
# allocator, tcmalloc (worker/CMakeLists.txt). python3-venv: scripts/python-env.sh.
BUILD_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config
  python3-venv
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libabsl-dev prometheus-cpp-dev libcpp-httplib-dev libgoogle-glog-dev libyaml-cpp-dev zlib1g-dev
  libgtest-dev libgmock-dev googletest
  libsqlite3-dev libsentencepiece-dev libgloo-dev libgoogle-perftools-dev
  nlohmann-json3-dev libssl-dev
  bible-kjv
)
# Tests, tools and images: plots, the Python test servers, certificates (the
# test control plane's PKI), Prometheus, podman with runc and debootstrap for
# scripts/build-images.sh, the CNI plugins and ip(8) for the test Nodes' pod network
# (tests/harness/kubelet_node.py), iptables and ipset for kube-router
# (tests/harness/kube_router.py), and clang (with its sanitizer runtime, which clang only
# recommends, for scripts/sanitize.sh) for its thread-safety analysis of the lock
# annotations (tests/static). Kubernetes and helm are built from their Go
# modules by scripts/kube-toolchain.sh (Go: see below).
HOST_PACKAGES=(
  gnuplot-nox clang libclang-rt-14-dev
  python3-grpcio python3-protobuf python3-yaml openssl
  prometheus
  podman runc debootstrap containernetworking-plugins iproute2 iptables ipset
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
  apt_install=($SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q
               --no-install-recommends -o DPkg::Lock::Timeout=600)
  $SUDO apt-get update -q
  "${apt_install[@]}" "${missing[@]}"
  # Every installed package with headers (/usr/include) at the mirror's version
  # too: the images' build stage installs its packages from the same mirror, and
  # ccache hits there only on a file that includes the same header text as the
  # host build's. An older libssl-dev and linux-libc-dev on a fresh machine made
  # 19 of the image build's 119 objects miss.
  mapfile -t headers < <(dpkg-query -S /usr/include 2>/dev/null |
                           sed 's/: \/usr\/include$//' | tr ',' '\n' | sed 's/^ *//')
  "${apt_install[@]}" --only-upgrade "${headers[@]}"
fi

# Rust: cargo builds libpaci_hf_tokenizer (worker/data/CMakeLists.txt), which
# CMake finds on PATH or in ~/.cargo/bin. Debian 12's cargo is too old for
# the crates it pins (Cargo.lock version 4 wants cargo 1.78 or newer).
RUST_TOOLCHAIN=1.95.0
CARGO_BIN=${CARGO_HOME:-${HOME:-/root}/.cargo}/bin
cargo_works() {
  local cargo
  cargo=$(command -v cargo || echo "$CARGO_BIN/cargo")
  [[ -x $cargo ]] && "$cargo" --version > /dev/null 2>&1
}
if ! cargo_works; then
  rustup=$(command -v rustup || echo "$CARGO_BIN/rustup")
  if [[ -x $rustup ]]; then
    echo "installing Rust $RUST_TOOLCHAIN with $rustup"
    "$rustup" toolchain install "$RUST_TOOLCHAIN" --profile minimal
    "$rustup" default > /dev/null 2>&1 || "$rustup" default "$RUST_TOOLCHAIN"
  fi
fi
if ! cargo_works; then
  if [[ ${1:-} == --build ]]; then
    # The images' build stage: it links the library the host built
    # (scripts/build-images.sh mounts it), so it needs no Rust.
    echo "install-deps.sh: no cargo; CMake then needs a prebuilt libpaci_hf_tokenizer.a" \
         "(-DPACI_HF_TOKENIZER_PREBUILT=FILE, or worker/data/hf_tokenizer_shim/prebuilt/)" >&2
  else
    echo "install-deps.sh: cargo not found (on PATH or in $CARGO_BIN), and no rustup to" \
         "install Rust $RUST_TOOLCHAIN with: install rustup (it puts cargo in ~/.cargo/bin)," \
         "then run this again" >&2
    exit 1
  fi
fi
