#!/usr/bin/env bash
# Downloads (does not install) Debian's packages of what building paci needs
# and a GPU machine with only CUDA, PyTorch, cmake and a compiler lacks: gRPC,
# protobuf with protoc and the gRPC plugins, Abseil, glog, prometheus-cpp,
# yaml-cpp, cpp-httplib, SQLite, SentencePiece, GoogleTest, nlohmann-json, Gloo's
# headers (c10d's Gloo process group, worker/runtime/replica_group.cc), tcmalloc
# (the worker's allocator), pkg-config, and the libraries these need in turn.
# scripts/gpu-check.sh unpacks them there.
#
#   scripts/gpu-deps.sh DIR     (about 24 MB of .deb files)
#
# Left out on purpose, as every Ubuntu or Debian base has them: libc6,
# libstdc++6, libgcc-s1, libssl3, zlib1g, liblzma5, libzstd1. Left out too:
# libcurl4 (only prometheus-cpp's push library, which paci does not link,
# needs it; gpu-check.sh points libcurl.so at the machine's or at a stub).
set -euo pipefail
dir=${1:?usage: $0 DIR}
mkdir -p "$dir"
PACKAGES=(
  libprotobuf-dev libprotobuf32 libprotobuf-lite32 protobuf-compiler libprotoc32
  libgrpc++-dev libgrpc++1.51 libgrpc-dev libgrpc29 protobuf-compiler-grpc
  libabsl-dev libabsl20220623 libc-ares-dev libc-ares2 libre2-dev libre2-9
  libgoogle-glog-dev libgoogle-glog0v6 libgflags-dev libgflags2.2 libunwind-dev libunwind8
  prometheus-cpp-dev libprometheus-cpp-core1.0 libprometheus-cpp-pull1.0
  libprometheus-cpp-push1.0 libcivetweb-dev libcivetweb1 civetweb libcurl4-openssl-dev
  libyaml-cpp-dev libyaml-cpp0.7
  libcpp-httplib-dev libcpp-httplib0.11 libbrotli-dev libbrotli1 libssl-dev zlib1g-dev
  libsqlite3-dev libsqlite3-0 libsentencepiece-dev libsentencepiece0
  libgtest-dev libgmock-dev googletest nlohmann-json3-dev
  libgloo-dev
  libgoogle-perftools-dev libgoogle-perftools4 libtcmalloc-minimal4
  pkgconf pkgconf-bin libpkgconf3
)
cd "$dir"
# apt-get download writes into the current folder; the _apt user may not
# write here, which only costs a warning.
apt-get download "${PACKAGES[@]}"
# Names without '%' (an epoch is written %3a).
for f in *%3a*; do [ -e "$f" ] && mv "$f" "${f//%3a/_}"; done
du -sh .
