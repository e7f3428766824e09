#!/usr/bin/env bash
# Makes the project's Python environment: a virtual environment of Debian's
# python3 with the packages pinned, with their hashes, in
# third_party/python/requirements.txt (PyTorch 2.11 and what it needs). It is
# paci's LibTorch too: every C++ target that links Torch builds against its
# torch/include and torch/lib, and the Python tests and benches import it.
#
#   scripts/python-env.sh [BUILD_DIR]      (default: build)
#
# The environment is ${PACI_CACHE_DIR:-$HOME/.cache/paci}/python/KEY, KEY a hash
# of the pins and this script, so a warm machine takes no time and a fresh one
# installs once (about 2.6 GB of wheels). BUILD_DIR/python-env links to it;
# BUILD_DIR/python-env/bin/python is the interpreter and BUILD_DIR/python-env/libtorch
# the torch package folder (lib/, include/, share/cmake/Torch). It sees
# Debian's packages too (python3-grpcio, python3-yaml): --system-site-packages.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
REQUIREMENTS=third_party/python/requirements.txt
PYTHON=/usr/bin/python3  # Debian's: the one whose python3-grpcio the tests use

CACHE_ROOT=${PACI_CACHE_DIR:-${HOME:-/root}/.cache/paci}
key=$(cat scripts/python-env.sh "$REQUIREMENTS" | sha256sum | cut -c1-16)
venv=$CACHE_ROOT/python/$key

if [[ ! -f $venv/.complete ]]; then
  start=$SECONDS
  echo "python-env: installing $REQUIREMENTS into $venv"
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  "$PYTHON" -m venv --system-site-packages "$venv"
  # Exactly the listed files: every one pinned and hashed, nothing resolved.
  "$venv/bin/python" -m pip install --no-input --progress-bar on --require-hashes --no-deps \
    --no-compile -r "$REQUIREMENTS"
  site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  ln -sfn "$site/torch" "$venv/libtorch"
  "$venv/bin/python" -c 'import torch; print("python-env: torch", torch.__version__)'
  touch "$venv/.complete"
  echo "python-env: installed in $((SECONDS - start)) s"
fi

mkdir -p "$BUILD_DIR"
ln -sfn "$venv" "$BUILD_DIR/python-env"
echo "python-env: $(grep -m1 '^torch==' "$REQUIREMENTS" | cut -d' ' -f1) in $BUILD_DIR/python-env"
