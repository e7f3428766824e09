#!/usr/bin/env bash
# Builds the coordinator, operator and worker images from deploy/docker/Dockerfile
# with podman, and writes their references to build/images.env.
#
#   scripts/build-images.sh [--cuda] [--check] [--force] [--no-cache] [--rebuild-base]
#                            [--prune] [--verbose] [--list-context]
#
#   --cuda          also the CUDA worker image, paci-worker-cuda (about 3.9 GB:
#                   LibTorch's CUDA half and the CUDA 13 libraries); --check then
#                   runs it too: it trains on the CPU and refuses runtime.device:
#                   cuda where there is no GPU
#   --check         then run each image once: it starts, prints its usage, its
#                   libraries resolve; the coordinator serves and writes its
#                   store; the worker reads its corpus and trains a few steps
#   --force         build even when an image of this content exists
#   --no-cache      build without podman's layer cache (implies --force)
#   --rebuild-base  make the Debian base images again
#   --prune         remove the three images' other content tags (podman's
#                   layer cache, the build stage's included, stays)
#   --verbose       show podman's whole output (else: build/images-TARGET.log)
#   --list-context  print the files the content hash covers, and stop
#
# No registry is needed. The base images are made here when missing:
# debootstrap --variant=minbase bookworm from the host's Debian mirror, imported
# as docker.io/library/debian:bookworm and :bookworm-slim (the names the
# Dockerfile's FROM lines use), labelled with a hash of this recipe. A
# debian:bookworm already present without that label (pulled from a
# registry) is used as it is.
#
# Images are named by content: localhost/paci-TARGET:HASH, HASH covering the
# build context (git's files less .dockerignore, uncommitted changes
# included), the Dockerfile, the base images and the Rust library built for
# them (libpaci_hf_tokenizer); a build is skipped when that tag exists. Each
# is also tagged :latest and with the chart's appVersion (the tag the Helm
# chart's defaults name). The host's ccache (ccache -k cache_dir, or
# PACI_CCACHE_DIR) is mounted into the build, so after a host build the
# images cost little compiling.
#
# podman reads deploy/docker/containers.conf (CONTAINERS_CONF, unless set):
# runc, the host's network, the host's ulimits.
#
# Environment: PACI_IMAGES_ENV (default build/images.env), PACI_CCACHE_DIR,
# PACI_DEBIAN_MIRROR, PACI_DEBIAN_SECURITY_MIRROR (default: the host's apt
# sources, else deb.debian.org), PACI_IMAGE_SOURCE (the source label; default
# the origin remote's https address).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

TARGETS=(coordinator operator worker)
DOCKERFILE=deploy/docker/Dockerfile
PREFIX=localhost/paci-
SUITE=bookworm
BASE_FULL=docker.io/library/debian:$SUITE
BASE_SLIM=docker.io/library/debian:$SUITE-slim
BASE_LABEL=dev.paci.base.recipe
CONTENT_LABEL=dev.paci.content
ENV_FILE=${PACI_IMAGES_ENV:-build/images.env}
export CONTAINERS_CONF=${CONTAINERS_CONF:-$ROOT/deploy/docker/containers.conf}

CUDA=0 CHECK=0 FORCE=0 NO_CACHE=0 REBUILD_BASE=0 PRUNE=0 VERBOSE=0 LIST_CONTEXT=0
for arg in "$@"; do
  case $arg in
    --cuda) CUDA=1 ;;
    --check) CHECK=1 ;;
    --force) FORCE=1 ;;
    --no-cache) NO_CACHE=1 FORCE=1 ;;
    --rebuild-base) REBUILD_BASE=1 ;;
    --prune) PRUNE=1 ;;
    --verbose) VERBOSE=1 ;;
    --list-context) LIST_CONTEXT=1 ;;
    -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "build-images.sh: unknown argument $arg (see --help)" >&2; exit 2 ;;
  esac
done
((CUDA)) && TARGETS+=(worker-cuda)

# ---- progress, timing, failure
PHASE="" PHASE_START=0 SUMMARY=()
T0=$(date +%s.%N)
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
phase() {  # phase NAME: ends the previous phase, starts NAME
  phase_end
  PHASE=$1 PHASE_START=$(date +%s.%N)
  echo "==> $PHASE"
}
phase_end() {
  if [[ -n $PHASE ]]; then
    local t; t=$(elapsed "$PHASE_START")
    echo "    ($PHASE: ${t}s)"
    SUMMARY+=("$(printf '%-44s %8ss' "$PHASE" "$t")")
  fi
  PHASE=""
}
die() {
  echo "build-images.sh: FAILED${PHASE:+ in phase '$PHASE'}: $*" >&2
  exit 1
}
on_error() {
  echo "build-images.sh: FAILED${PHASE:+ in phase '$PHASE'} (line $1: exit status $2)" >&2
}
trap 'on_error $LINENO $?' ERR
CLEANUP=()
trap 'rm -rf --one-file-system "${CLEANUP[@]}"' EXIT

# ---- the build context's files (for the content hash)
# The context's files: git's (tracked and untracked, less .gitignore'd) less
# what .dockerignore excludes. Its patterns, as Docker reads them: a path from
# the top (globs match within one path component; a folder's pattern covers
# what is below it), **/GLOB for any component, !PATTERN to take back; the
# last pattern that matches decides.
IGNORE=()
while IFS= read -r line || [[ -n $line ]]; do
  line=${line%%#*}; line=${line%"${line##*[![:space:]]}"}
  neg=""; [[ $line == '!'* ]] && neg='!' line=${line#!}
  line=${line#/}; line=${line%/}
  [[ -n $line ]] && IGNORE+=("$neg$line")
done < <(cat .dockerignore 2>/dev/null)
matches() {  # matches PATH PATTERN: PATH or a folder above it matches
  local pat=$2 prefix="" rest=$1 comp
  if [[ $pat == '**/'* && $pat != '**/'*/* ]]; then
    pat=${pat#'**/'}
    while [[ -n $rest ]]; do
      comp=${rest%%/*}
      [[ $rest == */* ]] && rest=${rest#*/} || rest=""
      # shellcheck disable=SC2053
      [[ $comp == $pat ]] && return 0
    done
    return 1
  fi
  local slashes=${pat//[!\/]/}
  while [[ -n $rest ]]; do
    prefix=${prefix:+$prefix/}${rest%%/*}
    [[ $rest == */* ]] && rest=${rest#*/} || rest=""
    # shellcheck disable=SC2053
    [[ ${prefix//[!\/]/} == "$slashes" && $prefix == $pat ]] && return 0
  done
  return 1
}
ignored() {  # ignored PATH: whether .dockerignore leaves it out of the context
  local entry out=1
  for entry in "${IGNORE[@]}"; do
    if [[ $entry == '!'* ]]; then
      matches "$1" "${entry#!}" && out=1
    else
      matches "$1" "$entry" && out=0
    fi
  done
  return $out
}
if git rev-parse --is-inside-work-tree > /dev/null 2>&1; then
  mapfile -d '' ALL < <(git ls-files -z --cached --others --exclude-standard)
else
  mapfile -d '' ALL < <(find . -type f ! -path './.git/*' -printf '%P\0')
fi
FILES=()
for f in "${ALL[@]}"; do
  [[ -f $f ]] && ! ignored "$f" && FILES+=("$f")
done
((${#FILES[@]})) || die "no files in the build context"
if ((LIST_CONTEXT)); then printf '%s\n' "${FILES[@]}" | LC_ALL=C sort; exit 0; fi
unset ALL

# One run at a time on this host: the runs share podman's storage and tags.
LOCK=${TMPDIR:-/tmp}/paci-build-images.lock
exec 9>"$LOCK"
if ! flock -n 9; then
  echo "==> waiting for another build-images.sh to finish"
  flock -w 3600 9 || die "another build-images.sh held $LOCK for an hour"
fi

# ---- tools
phase "tools (podman runc debootstrap)"
[[ $(id -u) -eq 0 ]] || die "run as root: debootstrap and rootful podman need it"
missing=()
for pkg in podman runc debootstrap; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "installing: ${missing[*]}"
  apt-get update -q || die "apt-get update"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    -o DPkg::Lock::Timeout=600 "${missing[@]}" || die "apt-get install ${missing[*]}"
fi
[[ -f $CONTAINERS_CONF ]] || die "no $CONTAINERS_CONF"
podman version --format '{{.Client.Version}}' > /dev/null || die "podman does not run"

# ---- base images
# The host's mirror for SUITE (deb822 .sources or one-line .list), else deb.debian.org.
host_mirror() {  # host_mirror SUITE
  local uri=""
  shopt -s nullglob
  local sources=(/etc/apt/sources.list.d/*.sources) lists=(/etc/apt/sources.list /etc/apt/sources.list.d/*.list)
  shopt -u nullglob
  if ((${#sources[@]})); then
    uri=$(awk -v RS= -v want="$1" '{
        uri = ""; suites = ""; n = split($0, line, "\n")
        for (i = 1; i <= n; i++) {
          if (line[i] ~ /^URIs:/) { sub(/^URIs:[ \t]*/, "", line[i]); split(line[i], u, /[ \t]+/); uri = u[1] }
          if (line[i] ~ /^Suites:/) { sub(/^Suites:[ \t]*/, "", line[i]); suites = " " line[i] " " }
        }
        if (uri != "" && index(suites, " " want " ")) { print uri; exit }
      }' "${sources[@]}")
  fi
  if [[ -z $uri ]] && ((${#lists[@]})); then
    uri=$(awk -v want="$1" '$1 == "deb" {
        f = 2; if ($2 ~ /^\[/) { while (f <= NF && $f !~ /\]$/) f++; f++ }
        if ($(f + 1) == want) { print $f; exit }
      }' "${lists[@]}" 2>/dev/null)
  fi
  echo "${uri%/}"
}
MIRROR=${PACI_DEBIAN_MIRROR:-$(host_mirror "$SUITE")}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
SECURITY_MIRROR=${PACI_DEBIAN_SECURITY_MIRROR:-$(host_mirror "$SUITE-security")}
SECURITY_MIRROR=${SECURITY_MIRROR:-http://deb.debian.org/debian-security}

# Makes both base images from one debootstrap. Its text is part of the recipe hash.
make_base() {
  local tmp rootfs
  tmp=$(mktemp -d "${TMPDIR:-/var/tmp}/paci-base.XXXXXX")
  CLEANUP+=("$tmp")
  rootfs=$tmp/rootfs
  echo "debootstrap --variant=minbase $SUITE from $MIRROR"
  debootstrap --variant=minbase --components=main "$SUITE" "$rootfs" "$MIRROR" \
    > "$tmp/debootstrap.log" 2>&1 || { tail -30 "$tmp/debootstrap.log"; return 1; }
  rm -f "$rootfs/etc/apt/sources.list"
  cat > "$rootfs/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $SECURITY_MIRROR
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  # As Debian's container images: no package caches kept, no translations.
  cat > "$rootfs/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
  echo 'Acquire::Languages "none";' > "$rootfs/etc/apt/apt.conf.d/docker-no-languages"
  echo 'APT::AutoRemove::SuggestsImportant "false";' > "$rootfs/etc/apt/apt.conf.d/docker-autoremove-suggests"
  # The point release's security and stable updates.
  cp /etc/resolv.conf "$rootfs/etc/resolv.conf"
  chroot "$rootfs" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
    sh -c 'apt-get update -q && apt-get upgrade -y -q && apt-get clean' > "$tmp/upgrade.log" 2>&1 ||
    { tail -30 "$tmp/upgrade.log"; return 1; }
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/* "$rootfs"/var/log/*.log \
    "$rootfs"/var/log/apt/* "$rootfs"/tmp/* "$rootfs/etc/hostname"
  : > "$rootfs/etc/resolv.conf"
  import_rootfs "$rootfs" "$BASE_FULL"
  # -slim: no documentation, manuals or translations (now or from later packages).
  cat > "$rootfs/etc/dpkg/dpkg.cfg.d/docker-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/lintian/overrides/*
path-exclude /usr/share/locale/*
path-exclude /usr/share/man/*
EOF
  find "$rootfs/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
  find "$rootfs/usr/share/doc" -mindepth 1 -type d -empty -delete
  rm -rf "$rootfs"/usr/share/{groff,info,linda,lintian/overrides,locale,man}/*
  import_rootfs "$rootfs" "$BASE_SLIM"
}
import_rootfs() {  # import_rootfs DIR NAME
  echo "podman import $2"
  tar --numeric-owner --xattrs -C "$1" -c . |
    podman import --quiet --change 'CMD ["bash"]' --change "LABEL $BASE_LABEL=$BASE_HASH" \
      --message "debootstrap --variant=minbase $SUITE" - "$2" > /dev/null
}
image_label() {  # image_label IMAGE LABEL: the value, empty when none
  local v
  v=$(podman image inspect --format "{{index .Labels \"$2\"}}" "$1" 2>/dev/null) || v=""
  [[ $v == "<no value>" ]] && v=""
  echo "$v"
}

BASE_HASH=$( { declare -f make_base import_rootfs; echo "$SUITE $MIRROR $SECURITY_MIRROR"; } |
  sha256sum | cut -c1-16)
phase "base images (recipe $BASE_HASH)"
base_state() {  # ours (this recipe), foreign (no label: pulled), stale, missing
  local img=$1 label
  podman image exists "$img" || { echo missing; return; }
  label=$(image_label "$img" "$BASE_LABEL")
  if [[ -z $label ]]; then echo foreign
  elif [[ $label == "$BASE_HASH" ]]; then echo ours
  else echo stale; fi
}
full_state=$(base_state "$BASE_FULL") slim_state=$(base_state "$BASE_SLIM")
if ((REBUILD_BASE)) || [[ $full_state == missing || $full_state == stale ||
                           $slim_state == missing || $slim_state == stale ]]; then
  echo "making $BASE_FULL and $BASE_SLIM ($full_state, $slim_state)"
  make_base
else
  echo "have $BASE_FULL ($full_state) and $BASE_SLIM ($slim_state)"
fi
BASE_IDS="$(podman image inspect --format '{{.Id}}' "$BASE_FULL") $(podman image inspect --format '{{.Id}}' "$BASE_SLIM")"

# ---- LibTorch: the Python environment's site-packages (its folder is named by
# a hash of its pins), mounted into the build stage.
phase "LibTorch (scripts/python-env.sh)"
scripts/python-env.sh build > /dev/null || die "scripts/python-env.sh"
SITE_PACKAGES=$(dirname "$(readlink -f build/python-env/libtorch)")
echo "$SITE_PACKAGES"

# ---- libpaci_hf_tokenizer: Hugging Face's tokenizers crate as a Rust static
# library (worker/data/hf_tokenizer_shim/). The build stage has no Rust: cargo
# builds it here, into the target folder of the host build (warm: seconds),
# and the build stage's CMake links the copy mounted at
# worker/data/hf_tokenizer_shim/prebuilt (worker/data/CMakeLists.txt).
phase "libpaci_hf_tokenizer (cargo)"
CARGO=$(command -v cargo || echo "${CARGO_HOME:-${HOME:-/root}/.cargo}/bin/cargo")
[[ -x $CARGO ]] || die "cargo not found (on PATH or in ~/.cargo/bin): run scripts/install-deps.sh"
HF_TARGET=$ROOT/build/worker/data/hf_tokenizer_shim
CARGO_TARGET_DIR=$HF_TARGET "$CARGO" build --release --locked --quiet \
  --manifest-path worker/data/hf_tokenizer_shim/Cargo.toml || die "cargo build of libpaci_hf_tokenizer"
HF_PREBUILT=$(mktemp -d "${TMPDIR:-/tmp}/paci-hf-tokenizer.XXXXXX")
CLEANUP+=("$HF_PREBUILT")
cp "$HF_TARGET/release/libpaci_hf_tokenizer.a" "$HF_PREBUILT/"
HF_HASH=$(sha256sum "$HF_PREBUILT/libpaci_hf_tokenizer.a" | cut -c1-16)
echo "libpaci_hf_tokenizer.a $HF_HASH"

# ---- content hash of the build context (its files, the Dockerfile, the base
# images, the LibTorch, libpaci_hf_tokenizer)
phase "content hash"
CONTENT_HASH=$( {
  printf '%s\n' "${FILES[@]}" | LC_ALL=C sort -u | while IFS= read -r f; do
    [[ -x $f ]] && echo "x $f" || echo "- $f"
  done
  printf '%s\0' "${FILES[@]}" | LC_ALL=C sort -zu | xargs -0 sha256sum
  sha256sum "$DOCKERFILE" .dockerignore
  echo "base $BASE_IDS"
  echo "libtorch $SITE_PACKAGES"
  echo "hf-tokenizer $HF_HASH"
} | sha256sum | cut -c1-16)
echo "${#FILES[@]} files in the context; content $CONTENT_HASH"

# ---- the images
CCACHE_HOST=${PACI_CCACHE_DIR:-$(ccache -k cache_dir 2>/dev/null || true)}
BUILD_FLAGS=(-f "$DOCKERFILE"  # runc and the host network: containers.conf
             --volume "$SITE_PACKAGES:/opt/paci/site-packages:ro"
             --volume "$HF_PREBUILT:/src/worker/data/hf_tokenizer_shim/prebuilt:ro")
if [[ -n $CCACHE_HOST ]]; then
  mkdir -p "$CCACHE_HOST"
  BUILD_FLAGS+=(--volume "$CCACHE_HOST:/ccache")
  echo "ccache: $CCACHE_HOST mounted at /ccache"
else
  echo "ccache: none on the host; the build compiles everything"
fi
((NO_CACHE)) && BUILD_FLAGS+=(--no-cache)
VERSION=$(awk -F'"' '/^appVersion:/ { print $2 }' helm/paci/Chart.yaml 2>/dev/null || true)
REVISION=$(git rev-parse HEAD 2>/dev/null || echo unknown)
[[ $REVISION != unknown && -n $(git status --porcelain 2>/dev/null | head -1) ]] && REVISION+=-dirty
# The source label: PACI_IMAGE_SOURCE, else the origin remote when it is a web address.
SOURCE=${PACI_IMAGE_SOURCE-$(git remote get-url origin 2>/dev/null || true)}
[[ $SOURCE == https://* ]] || SOURCE=""
VERSION=${VERSION:-0.1.0} CREATED=$(date -u +%Y-%m-%dT%H:%M:%SZ)
BUILD_FLAGS+=(--build-arg "VERSION=$VERSION" --build-arg "REVISION=$REVISION"
              --build-arg "CREATED=$CREATED" --build-arg "SOURCE=$SOURCE")
# ccache hashes these: the host's values make the host's cache entries match.
for var in LANG LC_ALL LC_CTYPE LC_MESSAGES; do
  [[ -n ${!var-} ]] && BUILD_FLAGS+=(--build-arg "$var=${!var}")
done
mkdir -p "$(dirname "$ENV_FILE")"
LOGDIR=$(dirname "$ENV_FILE")

# podman 4.3 takes a LABEL step from its layer cache when only the ARG in its
# value changed, so an image from cache would carry an earlier build's
# created and revision labels: each image gets this build's labels (and
# the content hash) in a step of its own, from literal values.
STAMP_DIR=$(mktemp -d "${TMPDIR:-/tmp}/paci-stamp.XXXXXX")
CLEANUP+=("$STAMP_DIR")
mkdir "$STAMP_DIR/context"
quote() { local v=${1//\\/\\\\}; printf '"%s"' "${v//\"/\\\"}"; }
stamp() {  # stamp TARGET IMAGE-ID REF...: REFs name IMAGE-ID with this build's labels
  local target=$1 iid=$2; shift 2
  local file=$STAMP_DIR/Containerfile.$target tags=()
  {
    echo "FROM $iid"
    echo "LABEL org.opencontainers.image.created=$(quote "$CREATED") \\"
    echo "      org.opencontainers.image.revision=$(quote "$REVISION") \\"
    echo "      org.opencontainers.image.version=$(quote "$VERSION") \\"
    echo "      org.opencontainers.image.source=$(quote "$SOURCE") \\"
    echo "      $CONTENT_LABEL=$(quote "$CONTENT_HASH")"
  } > "$file"
  for ref in "$@"; do tags+=(-t "$ref"); done
  podman build --quiet -f "$file" "${tags[@]}" "$STAMP_DIR/context" > /dev/null
}

declare -A IMAGE
for target in "${TARGETS[@]}"; do
  ref=$PREFIX$target:$CONTENT_HASH
  IMAGE[$target]=$ref
  if ((!FORCE)) && podman image exists "$ref"; then
    phase "image $target: have $ref"
    podman tag "$ref" "$PREFIX$target:latest" "$PREFIX$target:$VERSION"
    continue
  fi
  phase "image $target: build $ref"
  log=$LOGDIR/images-$target.log
  build=(podman build "${BUILD_FLAGS[@]}" --target "$target" --iidfile "$STAMP_DIR/$target.iid" .)
  if ((VERBOSE)); then
    "${build[@]}" 2>&1 | tee "$log" || die "podman build --target $target (log: $log)"
  else
    echo "    (podman's output: $log)"
    if ! "${build[@]}" > "$log" 2>&1; then
      tail -40 "$log" >&2
      die "podman build --target $target (whole log: $log)"
    fi
    # The steps that ran (not from podman's layer cache), and ccache's counts.
    awk '/STEP [0-9]+\/[0-9]+: / { step = $0; next }
         /^--> Using cache/ { step = ""; cached++; next }
         step != "" { print step; step = "" }
         /^ccache, this build|^ *(Hits|Misses):/ { print }
         END { printf "%d steps from the layer cache\n", cached }' "$log" |
      sed 's/^/    /' | cut -c1-130
  fi
  stamp "$target" "$(cat "$STAMP_DIR/$target.iid")" "$ref" "$PREFIX$target:latest" \
    "$PREFIX$target:$VERSION" || die "could not label $ref"
done

phase "write $ENV_FILE"
{
  echo "# Written by scripts/build-images.sh: the images of content $CONTENT_HASH."
  echo "PACI_IMAGE_CONTENT_HASH=$CONTENT_HASH"
  for target in "${TARGETS[@]}"; do
    name=${target^^}
    echo "PACI_${name//-/_}_IMAGE=${IMAGE[$target]}"
  done
  echo "PACI_CONTAINERS_CONF=$CONTAINERS_CONF"
} > "$ENV_FILE.tmp"
mv "$ENV_FILE.tmp" "$ENV_FILE"
cat "$ENV_FILE"
podman images --format '{{.Repository}}:{{.Tag}}  {{.Size}}' |
  grep -E "^${PREFIX}[a-z]+:$CONTENT_HASH|^docker.io/library/debian:$SUITE" | sed 's/^/    /'

if ((PRUNE)); then
  phase "prune older images"
  for target in "${TARGETS[@]}"; do
    podman images --format '{{.Repository}}:{{.Tag}}' "$PREFIX$target" |
      grep -v -E ":($CONTENT_HASH|latest|$VERSION)$" | xargs -r podman rmi > /dev/null || true
  done
fi

# ---- the check: each image starts, as its user, with its libraries and data
# (scripts/check-images.sh)
if ((CHECK)); then
  # shellcheck source=scripts/check-images.sh
  source "$(dirname "${BASH_SOURCE[0]}")/check-images.sh"
  check_images
fi

phase_end
echo "==> done in $(elapsed "$T0")s"
printf '    %s\n' "${SUMMARY[@]}"
