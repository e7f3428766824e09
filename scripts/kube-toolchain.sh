#!/usr/bin/env bash
# Builds the real Kubernetes components the tests run, from their Go modules at
# the versions pinned in third_party/{kubernetes,etcd,helm,kueue} (go.mod and
# go.sum committed): etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, helm, and Kueue's manager with its CRDs
# (kueue-crds/). The binaries go to a cache folder named after a hash of
# those pins, so a warm machine takes no time and a fresh one builds once;
# BUILD_DIR/kube-bin links to it.
#
#   scripts/kube-toolchain.sh [--node] [BUILD_DIR]      (default: build)
#
# --node also builds what a real node needs, for the suite's test Nodes
# (tests/harness/kubelet_node.py): kubelet, containerd with its runc shim
# and ctr (third_party/containerd), kube-router (third_party/kube-router: its
# NetworkPolicy controller), and the pause image's program from the Kubernetes
# module's pause.c (gcc, static).
#
# The cache is ${PACI_CACHE_DIR:-$HOME/.cache/paci}/kube-toolchain/KEY. Go's
# own module and build caches make a rebuild after a change of pins quick.
set -euo pipefail
cd "$(dirname "$0")/.."
NODE=0
BUILD_DIR=build
for arg in "$@"; do
  case "$arg" in
    --node) NODE=1 ;;
    -*) echo "usage: $0 [--node] [BUILD_DIR]" >&2; exit 2 ;;
    *) BUILD_DIR=$arg ;;
  esac
done

KUBERNETES_VERSION=v1.36.3
ETCD_VERSION=v3.6.16
HELM_VERSION=v3.22.0
CONTAINERD_VERSION=v2.2.9
KUEUE_VERSION=v0.17.0
KUBE_ROUTER_VERSION=v2.1.0

CACHE_ROOT=${PACI_CACHE_DIR:-${HOME:-/root}/.cache/paci}
GO_TOOLCHAIN=go1.26.8
if ! command -v go >/dev/null; then
  echo "kube-toolchain: no go command on PATH (scripts/install-deps.sh installs Debian's)" >&2
  exit 1
fi
# go.mod names go 1.26.0. Go 1.21 or newer fetches that toolchain itself; an older go
# (Debian 12's is 1.19) downloads it as the module golang.org/toolchain, once.
if [[ $(go env GOVERSION) =~ ^go1\.([0-9]+) ]] && ((BASH_REMATCH[1] < 21)); then
  goroot=$CACHE_ROOT/$GO_TOOLCHAIN
  if [[ ! -x $goroot/bin/go ]]; then
    echo "kube-toolchain: $(go env GOVERSION) is too old; fetching $GO_TOOLCHAIN"
    dir=$(cd /tmp && GOFLAGS= go mod download -json "golang.org/toolchain@v0.0.1-$GO_TOOLCHAIN.linux-amd64" |
            sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
    rm -rf "$goroot.tmp" && mkdir -p "$(dirname "$goroot")" && cp -r "$dir" "$goroot.tmp"
    chmod -R u+w "$goroot.tmp" && chmod u+x "$goroot.tmp"/bin/* "$goroot.tmp"/pkg/tool/*/*
    mv "$goroot.tmp" "$goroot"
  fi
  export PATH=$goroot/bin:$PATH
fi
export GOTOOLCHAIN=${GOTOOLCHAIN:-auto}
export GOFLAGS=${GOFLAGS:--buildvcs=false}
# Without cgo, as the projects build their release binaries (Kubernetes' servers
# and kubectl, etcd, helm and Kueue are static), and without the DWARF that -w
# strips at the link anyway: etcd from an empty build cache in 55 s, not 67 s.
# What a real node runs (--node: kubelet, containerd) keeps cgo.
export CGO_ENABLED=${CGO_ENABLED:-0}
GCFLAGS=all=-dwarf=false

key=$(cat scripts/kube-toolchain.sh third_party/kubernetes/go.{mod,sum} third_party/etcd/go.{mod,sum} \
        third_party/helm/go.{mod,sum} third_party/containerd/go.{mod,sum} third_party/kueue/go.{mod,sum} \
        third_party/kube-router/go.{mod,sum} |
        sha256sum | cut -c1-16)
cache=$CACHE_ROOT/kube-toolchain/$key
bin=$cache/bin

k8s_ldflags() {
  local v=${KUBERNETES_VERSION#v} minor
  minor=$(cut -d. -f2 <<<"$v")
  local x="" pkg
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    x+=" -X $pkg.gitVersion=$KUBERNETES_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    x+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  echo "-s -w$x"
}

build() {  # build MODULE_DIR NAME PACKAGE LDFLAGS
  local dir=$1 name=$2 pkg=$3 ldflags=$4
  [[ -x $bin/$name ]] && return
  local start=$SECONDS
  echo "kube-toolchain: building $name ($pkg)"
  (cd "third_party/$dir" &&
     go build -trimpath -gcflags "$GCFLAGS" -ldflags "$ldflags" -o "$bin/$name.tmp" "$pkg")
  mv "$bin/$name.tmp" "$bin/$name"
  echo "kube-toolchain: $name built in $((SECONDS - start)) s"
}

mkdir -p "$bin"
build etcd etcd go.etcd.io/etcd/server/v3 "-s -w"
build helm helm helm.sh/helm/v3/cmd/helm \
  "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
for cmd in kube-apiserver kube-controller-manager kube-scheduler kubectl; do
  build kubernetes "$cmd" "k8s.io/kubernetes/cmd/$cmd" "$(k8s_ldflags)"
done
build kueue kueue sigs.k8s.io/kueue/cmd/kueue "-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion=$KUEUE_VERSION"
if [[ ! -d $bin/kueue-crds ]]; then
  # The CRDs of that release, as its module carries them (installed server-side:
  # the Workload's is 1.4 MB, past what client-side apply keeps in an annotation).
  kueue_dir=$(cd third_party/kueue && go mod download -json sigs.k8s.io/kueue |
                sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  rm -rf "$bin/kueue-crds.tmp" && mkdir -p "$bin/kueue-crds.tmp"
  cp "$kueue_dir"/config/components/crd/bases/*.yaml "$bin/kueue-crds.tmp/"
  chmod -R u+w "$bin/kueue-crds.tmp" && mv "$bin/kueue-crds.tmp" "$bin/kueue-crds"
fi

if ((NODE)); then
  export CGO_ENABLED=1
  build kubernetes kubelet k8s.io/kubernetes/cmd/kubelet "$(k8s_ldflags)"
  ctd_ldflags="-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION"
  for cmd in containerd containerd-shim-runc-v2 ctr; do
    build containerd "$cmd" "github.com/containerd/containerd/v2/cmd/$cmd" "$ctd_ldflags"
  done
  # kube-router's network policy controller (its firewall alone), for the NetworkPolicy test.
  build kube-router kube-router github.com/cloudnativelabs/kube-router/v2/cmd/kube-router \
    "-s -w -X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=$KUBE_ROUTER_VERSION"
  if [[ ! -x $bin/pause ]]; then
    k8s_dir=$(cd third_party/kubernetes && go mod download -json k8s.io/kubernetes |
                sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
    pause_c=$k8s_dir/build/pause/linux/pause.c
    gcc -static -O2 -DVERSION=3.10 -o "$bin/pause.tmp" "$pause_c"
    mv "$bin/pause.tmp" "$bin/pause"
  fi
fi

mkdir -p "$BUILD_DIR"
ln -sfn "$bin" "$BUILD_DIR/kube-bin"
echo "kube-toolchain: Kubernetes $KUBERNETES_VERSION, etcd $ETCD_VERSION, helm $HELM_VERSION, Kueue $KUEUE_VERSION$( ((NODE)) &&
  echo ", containerd $CONTAINERD_VERSION, kube-router $KUBE_ROUTER_VERSION") in $BUILD_DIR/kube-bin"
