#!/usr/bin/env bash
# The unit tests under AddressSanitizer + UndefinedBehaviorSanitizer, and each
# libFuzzer target of fuzz/ for FUZZ_SECONDS (default 60) from its seed corpus,
# built with clang into build-asan/ (ccache when present). Any finding (a
# memory error, undefined behaviour, a leak, a fuzzer crash or hang) fails it.
#   scripts/sanitize.sh            [FUZZ_SECONDS=60] [JOBS=n]
# The tests linked to LibTorch are left out: LibTorch itself is not
# instrumented, and they run in the main suite (the checkpoint fuzzer links it:
# what it checks is paci's handling of what LibTorch returns and throws).
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS="${JOBS:-$(nproc)}"
FUZZ_SECONDS="${FUZZ_SECONDS:-60}"
export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=1
scripts/python-env.sh build-asan  # the LibTorch (a link to the cached environment)
if [[ ! -f build-asan/build.ninja ]]; then
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER=clang++ -DPACI_SANITIZE=address,undefined -DPACI_FUZZ=ON \
    -DPACI_CARGO_TARGET_DIR="$PWD/build/worker/data/hf_tokenizer_shim"  # build/'s cargo output, not instrumented
fi
# The target list below is read from build.ninja: bring it up to date first
# (a test renamed since the last configure would be listed, then unknown).
ninja -C build-asan build.ninja >/dev/null
TORCH_TESTS='^(worker_model_test|worker_runtime_test|worker_stage_runtime_test|worker_inference_test|worker_replica_group_test)$'
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
echo "sanitize: building ${#TESTS[@]} tests and ${#FUZZERS[@]} fuzzers with ASan+UBSan"
cmake --build build-asan -j "$JOBS" --target "${TESTS[@]}" "${FUZZERS[@]}"

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:strict_string_checks=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export LSAN_OPTIONS="suppressions=$PWD/scripts/lsan.supp"
failed=()
ran=0
for test in "${TESTS[@]}"; do
  binary="$(find build-asan -name "$test" -type f -perm -u+x | head -1)"
  [[ -n "$binary" ]] || continue  # an aggregate target (tools_test), no binary
  ran=$((ran + 1))
  echo "sanitize: $test"
  (cd "$(dirname "$binary")" && ./"$test" --gtest_brief=1) ||
    failed+=("$test")
done
for fuzzer in "${FUZZERS[@]}"; do
  name="${fuzzer%_fuzz}"
  work="$(mktemp -d)"
  echo "sanitize: fuzzing $name for ${FUZZ_SECONDS}s"
  # shellcheck disable=SC2086  # the limits are several words
  if ! build-asan/fuzz/"$fuzzer" -max_total_time="$FUZZ_SECONDS" \
      ${FUZZ_LIMITS[$fuzzer]:--timeout=10 -rss_limit_mb=2048} -print_final_stats=1 \
      -artifact_prefix="$work/" "$work" "fuzz/corpus/$name" \
      > "$work/log" 2>&1; then
    tail -40 "$work/log"
    echo "sanitize: $fuzzer found a crash; the input is in $work" >&2
    failed+=("$fuzzer")
  else
    grep -E "stat::number_of_executed_runs|cov:" "$work/log" | tail -2
    rm -rf "$work"
  fi
done
if (( ${#failed[@]} )); then
  echo "sanitize: FAILED: ${failed[*]}" >&2
  exit 1
fi
echo "sanitize: $ran test binaries clean, ${#FUZZERS[@]} fuzzers ${FUZZ_SECONDS}s each clean"
