#!/usr/bin/env bash
# The unit tests under AddressSanitizer + UndefinedBehaviorSanitizer, and each
# libFuzzer target of fuzz/ for FUZZ_SECONDS (default 30) from its seed corpus,
# built with clang into build-asan/ (ccache when present; -O1 and line tables
# only: what a sanitizer report needs, at about half the compile time of -O2 -g).
# Any finding (a memory error, undefined behaviour, a leak, a fuzzer crash or
# hang) fails it. The test binaries, then the fuzzers (each one thread), run
# JOBS at a time.
#   scripts/sanitize.sh [--build]   [FUZZ_SECONDS=30] [JOBS=n]
# --build only builds (scripts/test.sh starts it early, at the lowest priority,
# to use what its other steps leave idle).
# The tests linked to LibTorch are left out: LibTorch itself is not
# instrumented, and they run in the main suite (the checkpoint fuzzer links it:
# what it checks is paci's handling of what LibTorch returns and throws).
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS="${JOBS:-$(nproc)}"
FUZZ_SECONDS="${FUZZ_SECONDS:-30}"
BUILD_ONLY=0
[[ "${1:-}" == --build ]] && BUILD_ONLY=1
scripts/python-env.sh build-asan  # the LibTorch (a link to the cached environment)
if [[ ! -f build-asan/build.ninja ]]; then
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only -DNDEBUG" \
    -DCMAKE_CXX_COMPILER=clang++ -DPACI_SANITIZE=address,undefined -DPACI_FUZZ=ON \
    -DPACI_CARGO_TARGET_DIR="$PWD/build/worker/data/hf_tokenizer_shim"  # build/'s cargo output, not instrumented
fi
# The target list below is read from build.ninja: bring it up to date first
# (a test renamed since the last configure would be listed, then unknown).
ninja -C build-asan build.ninja >/dev/null
TORCH_TESTS='^(worker_model_test|worker_runtime_test|worker_stage_runtime_test|worker_stage_host_test|worker_inference_test|worker_replica_group_test)$'
mapfile -t TESTS < <(ninja -C build-asan -t targets all | grep -v '^cmake_' |
                     sed -n 's/^\([a-z_]*_test\): phony$/\1/p' | grep -Ev "$TORCH_TESTS" | sort -u)
FUZZERS=(frame_fuzz job_spec_fuzz training_job_fuzz checkpoint_fuzz dataset_fuzz safetensors_fuzz)
# Per fuzzer limits: a slower input is a hang, a larger one out of memory. The
# checkpoint fuzzer's forged archives make LibTorch's unpickler allocate what a
# field says: a LONG_BINPUT memo id grows its memo table to that many entries
# (up to 64 GiB, filled; docs/reliability.md). It gets more of both, and runs
# in fork mode ignoring out-of-memory children: LibTorch's, not paci's; a
# crash (a sanitizer report) still fails the run.
declare -A FUZZ_LIMITS=(
  [checkpoint_fuzz]="-timeout=30 -rss_limit_mb=6144 -malloc_limit_mb=6144 -fork=1 -ignore_ooms=1"
)
# The programs that do not link LibTorch are built too (not run): with the
# tests they are every file without LibTorch, each compiled by clang with its
# thread-safety analysis an error (cmake/PaciTargets.cmake); tests/static checks
# the files with LibTorch.
PROGRAMS=(paci_coordinator paci_operator pacictl paci_simulate)
echo "sanitize: building ${#TESTS[@]} tests, ${#FUZZERS[@]} fuzzers and ${#PROGRAMS[@]} programs" \
     "with ASan+UBSan"
cmake --build build-asan -j "$JOBS" --target "${TESTS[@]}" "${FUZZERS[@]}" "${PROGRAMS[@]}"

(( BUILD_ONLY )) && exit 0

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export LSAN_OPTIONS="suppressions=$PWD/scripts/lsan.supp"
logs=$(mktemp -d)
failed=()
ran=0
declare -A RUNNING=()  # pid -> name
reap() {  # waits for one job; a failed one is named, its log shown
  local pid name
  wait -n -p pid || true
  name=${RUNNING[$pid]}
  unset "RUNNING[$pid]"
  if [[ -f "$logs/$name.failed" ]]; then
    tail -60 "$logs/$name.log"
    failed+=("$name")
  fi
}
start() {  # start NAME COMMAND...: runs it in the background, JOBS at a time
  local name=$1
  shift
  while (( ${#RUNNING[@]} >= JOBS )); do reap; done
  ( "$@" > "$logs/$name.log" 2>&1 || touch "$logs/$name.failed" ) &
  RUNNING[$!]=$name
}
run_test() {  # run_test BINARY
  cd "$(dirname "$1")" && ./"$(basename "$1")" --gtest_brief=1
}
run_fuzzer() {  # run_fuzzer NAME: a finding leaves its input in a kept folder
  local fuzzer=$1 name=${1%_fuzz} work
  work=$(mktemp -d)
  # shellcheck disable=SC2086  # the limits are several words
  if build-asan/fuzz/"$fuzzer" -max_total_time="$FUZZ_SECONDS" \
      ${FUZZ_LIMITS[$fuzzer]:--timeout=10 -rss_limit_mb=2048} -print_final_stats=1 \
      -artifact_prefix="$work/" "$work" "fuzz/corpus/$name" > "$work/log" 2>&1; then
    grep -E "stat::number_of_executed_runs|cov:" "$work/log" | tail -2
    rm -rf "$work"
  else
    tail -40 "$work/log"
    echo "sanitize: $fuzzer found a crash; the input is in $work"
    return 1
  fi
}
for test in "${TESTS[@]}"; do
  binary="$(find build-asan -name "$test" -type f -perm -u+x | head -1)"
  [[ -n "$binary" ]] || continue  # an aggregate target (tools_test), no binary
  ran=$((ran + 1))
  echo "sanitize: $test"
  start "$test" run_test "$binary"
done
for fuzzer in "${FUZZERS[@]}"; do
  echo "sanitize: fuzzing ${fuzzer%_fuzz} for ${FUZZ_SECONDS}s"
  start "$fuzzer" run_fuzzer "$fuzzer"
done
while (( ${#RUNNING[@]} )); do reap; done
for fuzzer in "${FUZZERS[@]}"; do
  [[ -f "$logs/$fuzzer.failed" ]] || { echo "sanitize: $fuzzer:"; cat "$logs/$fuzzer.log"; }
done
rm -rf "$logs"
if (( ${#failed[@]} )); then
  echo "sanitize: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "sanitize: $ran test binaries clean, ${#FUZZERS[@]} fuzzers ${FUZZ_SECONDS}s each clean"
