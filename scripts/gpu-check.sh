#!/usr/bin/env bash
# The GPU check, in one run on a machine with an NVIDIA GPU, the CUDA toolkit,
# cmake, a C++ compiler and PyTorch (with its LibTorch) but without gRPC,
# protobuf, Abseil, glog, prometheus-cpp and the rest of what paci builds with:
#
#   1. env:       GPU, driver, toolkit, compiler and PyTorch versions;
#   2. deps:      unpacks Debian's packages (scripts/gpu-deps.sh fetched them)
#                 with dpkg -x into a temporary prefix, never into /;
#   3. configure: -DPACI_CUDA=ON against PyTorch's LibTorch and that prefix;
#   4. build:     the binaries and tests that follow (all cores);
#   5. nccl:      two processes with NCCL on the one GPU (scripts/nccl_one_gpu.py),
#                 meanwhile the build runs;
#   6. tests:     worker_model_test (its CUDA cases, then all of it) and
#                 worker_nccl_link_test;
#   7. bench:     bench/gpu_benchmark.py on the build, bounded by what is left
#                 of the time budget; bench/results/gpu.json.
#
# A phase that fails is logged and the next one still runs when it can.
# Everything goes to OUT_DIR: env.log, build.log, nccl.log, tests.log,
# bench.log, gpu.json, summary.txt.
#
#   scripts/gpu-check.sh DEPS_DIR [OUT_DIR]      (OUT_DIR: $OUT, else gpu-check-out)
#
# Without cargo on the GPU machine, Hugging Face's tokenizers library comes
# built: copy build/worker/data/hf_tokenizer_shim/release/libpaci_hf_tokenizer.a
# (strip --strip-debug makes it 30 MB) to worker/data/hf_tokenizer_shim/prebuilt/.
#
# Environment: PYTHON (the python3 with torch; python3), BUILD_DIR (build-cuda),
# JOBS (all cores), BUDGET (seconds for the whole script, 480), BENCH_ARGS
# (more arguments for the benchmark), TARGETS (what to build), SKIP (phases
# to leave out, e.g. "nccl tests" when rerunning the benchmark on a kept
# build), KEEP_PREFIX=1 (leave the unpacked packages in place), and
# PACI_CPU_CHECK=1 to try the script on a machine without a GPU (configures
# for the CPU against the default LibTorch; no NCCL and no benchmark).
set -uo pipefail

deps=$(cd "${1:?usage: $0 DEPS_DIR [OUT_DIR]}" && pwd) || exit 2
out=${2:-${OUT:-gpu-check-out}}
mkdir -p "$out" && out=$(cd "$out" && pwd) || exit 2
cd "$(dirname "$0")/.." && root=$(pwd)

PYTHON=${PYTHON:-python3}
BUILD_DIR=${BUILD_DIR:-$root/build-cuda}
JOBS=${JOBS:-$(nproc)}
BUDGET=${BUDGET:-480}
CPU_ONLY=${PACI_CPU_CHECK:-0}
TARGETS=${TARGETS:-paci_worker paci_coordinator pacictl worker_model_test worker_nccl_link_test}
BENCH_ARGS=${BENCH_ARGS:-}
SKIP=${SKIP:-}
ARCH=x86_64-linux-gnu

start=$(date +%s)
now() { echo $(( $(date +%s) - start )); }
left() { echo $(( BUDGET - $(now) )); }
summary=$out/summary.txt
: > "$summary"
failed=0
# record NAME RC SECONDS
record() {
  local status=ok
  [ "$2" -ne 0 ] && { status="FAILED($2)"; failed=$((failed + 1)); }
  printf '%-10s %-12s %5ss   at %ss\n' "$1" "$status" "$3" "$(now)" | tee -a "$summary"
}
skipped() { [[ " $SKIP " == *" $1 "* || ( " $SKIP " == *" tests "* && $1 == *-test ) ]]; }
# phase NAME LOG FUNCTION: runs FUNCTION (in this shell) with its output
# appended to LOG, and records its exit status and time.
phase() {
  local name=$1 log=$2 fn=$3 t0 rc
  if skipped "$name"; then
    printf '%-10s %-12s\n' "$name" skipped | tee -a "$summary"
    return 0
  fi
  t0=$(date +%s)
  echo "===== $name ($(date -u +%H:%M:%S) UTC, ${t0}s epoch)" >> "$log"
  "$fn" >> "$log" 2>&1
  rc=$?
  echo "===== $name: exit $rc" >> "$log"
  record "$name" "$rc" $(( $(date +%s) - t0 ))
  return 0
}

export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
export CMAKE_POLICY_VERSION_MINIMUM=3.5   # CMake 4 reading older package configs
if ! command -v nvcc > /dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=$PATH:/usr/local/cuda/bin
fi

# ---- 1. env -----------------------------------------------------------------
torch_root='' capability=''
env_phase() {
  date -u; uname -a; head -2 /etc/os-release 2>/dev/null
  echo "cores: $(nproc)"; free -g | head -2; df -h "$root" | tail -1
  echo "--- nvidia-smi"; nvidia-smi; nvidia-smi --query-gpu=name,memory.total,clocks.max.sm,power.limit --format=csv
  echo "--- nvcc"; nvcc --version
  echo "--- cmake"; cmake --version | head -1
  echo "--- ninja"; ninja --version
  echo "--- c++"; ${CXX:-c++} --version | head -1
  echo "--- dpkg"; dpkg-deb --version | head -1
  echo "--- pkg-config"; command -v pkg-config || echo "none"
  echo "--- python"; command -v "$PYTHON"; "$PYTHON" --version
  "$PYTHON" - <<'EOF'
import os, torch
print("torch", torch.__version__, "cuda", torch.version.cuda, "cxx11abi", torch._C._GLIBCXX_USE_CXX11_ABI)
print("cmake_prefix_path", torch.utils.cmake_prefix_path)
print("cuda available", torch.cuda.is_available(), "devices", torch.cuda.device_count())
if torch.cuda.is_available():
    print("device", torch.cuda.get_device_name(0), "capability", torch.cuda.get_device_capability(0))
    print("nccl", torch.cuda.nccl.version())
    print("bf16 supported", torch.cuda.is_bf16_supported())
root = os.path.dirname(torch.__file__)
macros = os.path.join(root, "include", "c10", "macros", "cmake_macros.h")
if os.path.exists(macros):
    print("c10 glog:", [l.strip() for l in open(macros) if "GLOG" in l or "GFLAGS" in l])
EOF
  echo "--- C++ standard LibTorch asks for"
  grep -hs "__cplusplus <" "$torch_root/include/torch/csrc/api/include/torch/all.h" \
    "$torch_root/include/c10/util/C++17.h" "$torch_root/include/c10/macros/Macros.h" | head -5
  echo "--- LibTorch's include folder, and protobuf symbols libtorch_cpu exports (0: none to clash)"
  echo "$torch_root"/include/*
  nm -D --defined-only "$torch_root/lib/libtorch_cpu.so" 2> /dev/null | grep -c "_ZN6google8protobuf"
  echo "--- NCCL beside PyTorch"
  find "$torch_root/.." -maxdepth 4 \( -name 'libnccl.so*' -o -name nccl.h \) 2> /dev/null
}
# One import of torch (seconds): its CMake folder, its folder, the GPU's capability.
if torch_info=$("$PYTHON" -c 'import os, torch
print(torch.utils.cmake_prefix_path)
print(os.path.dirname(torch.__file__))
print("%d%d" % torch.cuda.get_device_capability(0) if torch.cuda.is_available() else "")' 2>/dev/null); then
  torch_root=$(sed -n 2p <<< "$torch_info")
  capability=$(sed -n 3p <<< "$torch_info")
fi
phase env "$out/env.log" env_phase

# ---- 2. deps ----------------------------------------------------------------
# One fixed place, so that a build folder from an earlier run stays valid.
prefix=${TMPDIR:-/tmp}/paci-gpudeps
rm -rf "$prefix" && mkdir -p "$prefix"
lib=$prefix/usr/lib/$ARCH
pkgconfig=
deps_phase() {
  local deb n=0 bad=0
  for deb in "$deps"/*.deb; do
    if command -v dpkg-deb > /dev/null; then
      dpkg-deb -x "$deb" "$prefix" || { echo "cannot unpack $deb"; bad=1; }
    else  # ar + tar where dpkg is missing
      local tmp; tmp=$(mktemp -d)
      (cd "$tmp" && ar x "$deb" && tar -xf data.tar.* -C "$prefix") || { echo "cannot unpack $deb"; bad=1; }
      rm -rf "$tmp"
    fi
    n=$((n + 1))
  done
  echo "unpacked $n packages into $prefix ($(du -sh "$prefix" | cut -f1))"
  # pkg-config files and find modules name /usr: make them name the prefix.
  find "$prefix" -name '*.pc' -exec sed -i -e "s|=/usr\$|=$prefix/usr|" -e "s|=/usr/|=$prefix/usr/|" {} +
  find "$lib/cmake" "$prefix/usr/share" -name '*.cmake' \
    -exec sed -i "s|\"/usr/share/|\"$prefix/usr/share/|g" {} + 2>/dev/null
  # Development symlinks (libssl.so, libz.so, libcurl.so) whose library is not
  # in the packages (the machine's own is used), or is absolute: point them at
  # the machine's library of that name (or a shorter version), else at an
  # empty stub (only for libraries that paci does not link: libcurl).
  local link target resolved name try d found
  mkdir -p "$prefix/stubs"
  while IFS= read -r link; do
    target=$(readlink "$link")
    case $target in /*) resolved=$target ;; *) resolved=$(dirname "$link")/$target ;; esac
    case $target in /*) ;; *) [ -e "$resolved" ] && continue ;; esac
    name=$(basename "$target") try=$name found=
    while [ -z "$found" ]; do
      for d in /usr/lib/$ARCH /lib/$ARCH /usr/lib64 /lib64 /usr/lib; do
        [ -e "$d/$try" ] && { found=$d/$try; break; }
      done
      case $try in *.so.*) try=${try%.*} ;; *) break ;; esac
    done
    if [ -z "$found" ]; then
      found=$prefix/stubs/$name
      ${CXX:-c++} -shared -o "$found" -x c++ /dev/null -Wl,-soname,"$name" || bad=1
      echo "stub: $link -> $found"
    else
      echo "system: $link -> $found"
    fi
    ln -sfn "$found" "$link"
  done < <(find "$prefix/usr/lib" -type l -name 'lib*.so*')
  # protoc and pkgconf need the prefix's libraries; cmake must not get them
  # (it would load the prefix's libraries in place of the machine's).
  mkdir -p "$prefix/wrap"
  # shellcheck disable=SC2016  # expanded by the wrapper, not here
  printf '#!/bin/sh\nLD_LIBRARY_PATH="%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "%s" "$@"\n' \
    "$lib" "$prefix/usr/bin/protoc" > "$prefix/wrap/protoc"
  # shellcheck disable=SC2016
  printf '#!/bin/sh\nLD_LIBRARY_PATH="%s${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "%s" "$@"\n' \
    "$lib" "$prefix/usr/bin/pkgconf" > "$prefix/wrap/pkg-config"
  chmod +x "$prefix/wrap/protoc" "$prefix/wrap/pkg-config"
  "$prefix/wrap/protoc" --version || bad=1
  LD_LIBRARY_PATH=$lib ldd "$prefix/usr/bin/grpc_cpp_plugin" | grep "not found" && bad=1
  return $bad
}
phase deps "$out/build.log" deps_phase
if pkg-config --version > /dev/null 2>&1; then pkgconfig=$(command -v pkg-config); else pkgconfig=$prefix/wrap/pkg-config; fi
export PKG_CONFIG_PATH=$lib/pkgconfig:$prefix/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}

# ---- 3. configure -----------------------------------------------------------
configure_phase() {
  local args=(-S "$root" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release
    -DCMAKE_PREFIX_PATH="$prefix/usr"
    -DProtobuf_PROTOC_EXECUTABLE="$prefix/wrap/protoc"
    -DPKG_CONFIG_EXECUTABLE="$pkgconfig"
    # Multiarch headers (openssl/opensslconf.h, curl/): a compiler default
    # under /usr, named here; after the system's, as Debian orders them.
    # <cstdint> in every file: GCC 13's library headers stopped bringing it,
    # and headers written for GCC 12 (Debian's) may lean on them for it.
    # At most 20 errors a file: the logs come back through a size limit.
    -DCMAKE_CXX_FLAGS="-idirafter $prefix/usr/include/$ARCH -include cstdint -fmax-errors=20"
    # RPATH, not RUNPATH: the prefix's folder then serves the libraries that
    # its libraries load in turn (glog's gflags, gRPC's c-ares), also where the
    # linker drops unused direct ones (Ubuntu's --as-needed), and the binaries
    # (the tests that gtest_discover_tests lists at build time too) run without
    # LD_LIBRARY_PATH, which cmake must not see (it would load the prefix's
    # libraries in place of the machine's).
    -DCMAKE_EXE_LINKER_FLAGS="-Wl,--disable-new-dtags -Wl,-rpath-link,$lib"
    -DCMAKE_SHARED_LINKER_FLAGS="-Wl,--disable-new-dtags -Wl,-rpath-link,$lib")
  command -v ninja > /dev/null && args+=(-G Ninja)
  if [ "$CPU_ONLY" != 1 ]; then
    args+=(-DPACI_CUDA=ON -DPACI_LIBTORCH="$torch_root")
    [ -n "$capability" ] && { args+=(-DCMAKE_CUDA_ARCHITECTURES="$capability"); export TORCH_CUDA_ARCH_LIST="${capability:0:-1}.${capability: -1}"; }
    # NCCL: the one PyTorch loads (its pip package), else CMake's own search.
    local nvidia inc so
    nvidia=$("$PYTHON" -c 'import nvidia; print(" ".join(nvidia.__path__))' 2>/dev/null)
    if [ -n "$nvidia" ]; then
      # shellcheck disable=SC2086  # one or more folders
      inc=$(find $nvidia -name nccl.h 2>/dev/null | head -1)
      # shellcheck disable=SC2086
      so=$(find $nvidia -name 'libnccl.so*' 2>/dev/null | head -1)
      [ -n "$inc" ] && [ -n "$so" ] && args+=(-DNCCL_INCLUDE_DIR="$(dirname "$inc")" -DNCCL_LIBRARY="$so")
      echo "NCCL of PyTorch: ${inc:-no nccl.h} ${so:-no libnccl}"
    fi
  elif [ -n "$torch_root" ]; then
    args+=(-DPACI_LIBTORCH="$torch_root")
  fi
  # A LibTorch that asks for C++20 gets it (paci's default is C++17).
  if grep -qs "__cplusplus < 202002L" "$torch_root/include/torch/csrc/api/include/torch/all.h" \
       "$torch_root/include/c10/util/C++17.h" "$torch_root/include/c10/macros/Macros.h"; then
    args+=(-DCMAKE_CXX_STANDARD=20)
  fi
  echo "cmake ${args[*]}"
  cmake "${args[@]}" || { tail -50 "$BUILD_DIR/CMakeFiles/CMakeError.log" 2>/dev/null; return 1; }
  echo "--- found:"
  grep -E "^(Protobuf_INCLUDE_DIR|Protobuf_LIBRARY_RELEASE|Protobuf_PROTOC_EXECUTABLE|gRPC_DIR|absl_DIR|glog_DIR|gflags_DIR|prometheus-cpp_DIR|yaml-cpp_DIR|GTest_DIR|nlohmann_json_DIR|SQLite3_INCLUDE_DIR|SQLite3_LIBRARY|ZLIB_LIBRARY_RELEASE|OPENSSL_SSL_LIBRARY|CURL_LIBRARY_RELEASE|NCCL_INCLUDE_DIR|NCCL_LIBRARY|PACI_LIBTORCH|CMAKE_CXX_STANDARD|GRPC_PYTHON_PLUGIN|PKG_CONFIG_EXECUTABLE|CMAKE_CUDA_ARCHITECTURES)[:=]" \
    "$BUILD_DIR/CMakeCache.txt"
}
phase configure "$out/build.log" configure_phase

# ---- 5. (started before the build) NCCL with two ranks on one GPU ------------
nccl_pid=
if [ "$CPU_ONLY" != 1 ] && ! skipped nccl; then
  ( echo "===== nccl ($(date -u +%H:%M:%S) UTC)"
    NCCL_DEBUG=WARN timeout -k 5 150 "$PYTHON" "$root/scripts/nccl_one_gpu.py"
    echo "===== nccl: exit $?" ) > "$out/nccl.log" 2>&1 &
  nccl_pid=$!
  nccl_t0=$(date +%s)
fi

# ---- 4. build -----------------------------------------------------------------
build_phase() {
  local keep=()
  [ -f "$BUILD_DIR/build.ninja" ] && keep=(-- -k 0)
  # shellcheck disable=SC2086
  cmake --build "$BUILD_DIR" -j "$JOBS" --target $TARGETS "${keep[@]}"
}
phase build "$out/build.log" build_phase
grep -E "error:|FAILED:|undefined reference" "$out/build.log" 2> /dev/null | head -20

if [ -n "$nccl_pid" ]; then
  wait "$nccl_pid"
  rc=$(sed -n 's/^===== nccl: exit //p' "$out/nccl.log")
  record nccl "${rc:-1}" $(( $(date +%s) - nccl_t0 ))
  grep -E "^(rank|NCCL verdict)|Duplicate GPU" "$out/nccl.log" | head -6
fi

# ---- 6. tests -----------------------------------------------------------------
run_env() { LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} "$@"; }
# The CUDA cases (not the refusal without a GPU); skipped ones fail here: on
# a GPU machine a skip means the binary sees no CUDA.
cuda_tests_phase() {
  local output rc
  output=$(run_env timeout -k 5 300 "$BUILD_DIR/worker/model/worker_model_test" \
    --gtest_filter='PlacementTest.CudaStage*:PlacementTest.CudaBf16*:AdamWTest.Cuda*' 2>&1)
  rc=$?
  echo "$output"
  if [ "$rc" -eq 0 ] && [ "$CPU_ONLY" != 1 ] && grep -q "^\[  SKIPPED \]" <<< "$output"; then
    echo "CUDA cases skipped: this binary sees no CUDA"
    return 3
  fi
  return "$rc"
}
model_tests_phase() {
  run_env timeout -k 5 300 "$BUILD_DIR/worker/model/worker_model_test"
}
nccl_tests_phase() {
  NCCL_DEBUG=WARN run_env timeout -k 5 120 "$BUILD_DIR/worker/transport/worker_nccl_link_test"
}
phase cuda-test "$out/tests.log" cuda_tests_phase
phase model-test "$out/tests.log" model_tests_phase
phase nccl-test "$out/tests.log" nccl_tests_phase
grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[  FAILED  \]|^\[  SKIPPED \]" "$out/tests.log" 2> /dev/null | head -20

# ---- 7. bench -----------------------------------------------------------------
bench_phase() {
  local limit
  limit=$(( $(left) - 15 ))
  [ "$limit" -gt 300 ] && limit=300
  [ "$limit" -lt 60 ] && limit=60
  echo "time limit ${limit}s"
  # shellcheck disable=SC2086
  timeout -k 10 "$limit" "$PYTHON" "$root/bench/gpu_benchmark.py" --no-build --skip-tests \
    --build-dir "$BUILD_DIR" --deps-prefix "$prefix" $BENCH_ARGS
}
if [ "$CPU_ONLY" != 1 ]; then
  phase bench "$out/bench.log" bench_phase
  cp "$root/bench/results/gpu.json" "$out/gpu.json" 2>/dev/null
  sed -n '/^run /,$p' "$out/bench.log" | head -40
fi

# No log over 12 MB: its first and last 4 MB.
for f in "$out"/*.log; do
  if [ "$(stat -c %s "$f")" -gt 12000000 ]; then
    { head -c 4000000 "$f"; printf '\n[... cut ...]\n'; tail -c 4000000 "$f"; } > "$f.cut" && mv "$f.cut" "$f"
  fi
done
echo "--- summary ($(now)s of ${BUDGET}s; logs in $out)"
cat "$summary"
if [ "${KEEP_PREFIX:-0}" = 1 ]; then echo "prefix kept: $prefix"; else rm -rf "$prefix"; fi
[ "$failed" -eq 0 ]
