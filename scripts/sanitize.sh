#!/usr/bin/env bash
# Sanitizer and fuzzing runs of the torch-free layers, built with clang
# (scripts/test.sh runs this after the main suite):
#   1. every torch-free test under AddressSanitizer + UndefinedBehaviorSanitizer
#      (build-asan/);
#   2. the parameter-server and client tests under ThreadSanitizer (build-tsan/);
#   3. each libFuzzer target (fuzz/) for TANDEM_FUZZ_SECONDS (default 20) on
#      a copy of its committed corpus, after replaying fuzz/regressions/,
#      one target per build job at a time.
# Any finding fails the run. At most 2 build jobs, as everywhere.
# `sanitize.sh build` only configures and builds the two trees (scripts/test.sh
# runs that beside the main suite).
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=${TANDEM_JOBS:-2}
# 20 s gives each target 0.3-1.6 million inputs here; set more for a long hunt.
FUZZ_SECONDS=${TANDEM_FUZZ_SECONDS:-20}
source scripts/timed.sh

configure() {  # dir, sanitizers, extra cmake args...
  local dir=$1 sanitizers=$2; shift 2
  if [[ ! -f "$dir/build.ninja" ]]; then
    CC=clang CXX=clang++ cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTANDEM_TORCH_FREE=ON \
      -DTANDEM_SANITIZERS="$sanitizers" -DTANDEM_CCACHE=ON "$@" >/dev/null
  fi
}

echo "sanitize: ASan+UBSan build of the torch-free layers and their tests (build-asan/)"
configure build-asan address,undefined -DTANDEM_FUZZ=ON
timed "asan build" cmake --build build-asan -j "$JOBS"
configure build-tsan thread -DTANDEM_FUZZ=OFF
echo "sanitize: TSan build of the parameter-server tests (build-tsan/)"
timed "tsan build" cmake --build build-tsan -j "$JOBS" --target tandem_ps_tests
if [[ ${1:-} == build ]]; then timed_summary; exit 0; fi
# detect_leaks: a leak is a finding too. Gloo and libzmq are not rebuilt,
# so what happens inside them is not checked, only our side of each call.
# alloc_dealloc_mismatch=0: libzmq 4.3.4 frees with free() what it took
# with new(nothrow), inside its own I/O thread (every socket test trips it).
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:strict_string_checks=1:alloc_dealloc_mismatch=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
timed "asan tests" bash -c 'cd build-asan && ctest --output-on-failure --timeout 600 -j "$1"' ctest "$JOBS"

echo "sanitize: the parameter-server tests under TSan"
# libzmq's own threads are not instrumented: its queues' hand-offs are
# invisible to TSan, so the checks cover our threads' use of our memory.
# One shard a build job, side by side: the binary runs its tests one by one.
tsan_shards() {
  local shard pids=() failed=0
  for ((shard = 0; shard < JOBS; shard++)); do
    GTEST_TOTAL_SHARDS=$JOBS GTEST_SHARD_INDEX=$shard \
      TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 suppressions=$PWD/scripts/tsan.supp" \
      build-tsan/tests/tandem_ps_tests --gtest_brief=1 >"build-tsan/shard-$shard.log" 2>&1 &
    pids+=($!)
  done
  for ((shard = 0; shard < JOBS; shard++)); do
    if ! wait "${pids[$shard]}"; then
      failed=1
      cat "build-tsan/shard-$shard.log"
    fi
  done
  tail -n 1 build-tsan/shard-*.log
  return $failed
}
timed "tsan tests" tsan_shards

echo "sanitize: fuzzing, ${FUZZ_SECONDS}s per target, $JOBS at a time (each fuzzer is one process on one core)"
# Replays the target's regressions, then fuzzes a copy of its corpus.
# Prints one line, or the failure and the inputs to keep.
fuzz_one() {
  local target=$1 binary=build-asan/fuzz/fuzz_$1 work runs before
  if [[ -d fuzz/regressions/$target ]] && compgen -G "fuzz/regressions/$target/*" >/dev/null; then
    "$binary" fuzz/regressions/$target/* >/dev/null 2>&1 || { "$binary" fuzz/regressions/$target/*; return 1; }
  fi
  work=$(mktemp -d)
  cp fuzz/corpus/$target/* "$work"/
  before=$(ls "$work" | wc -l)
  if ! "$binary" -max_total_time="$FUZZ_SECONDS" -rss_limit_mb=2048 -timeout=10 -print_final_stats=0 \
      -artifact_prefix="$work/" "$work" >"$work.log" 2>&1; then
    tail -40 "$work.log"
    echo "sanitize: fuzz_$target found a failing input; keep it in fuzz/regressions/$target/ once fixed:"
    ls "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-* 2>/dev/null || true
    return 1
  fi
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$work.log" | grep -o '[0-9]*$' || true)
  [[ -n "$runs" ]] || runs=$(grep -Eo '#[0-9]+' "$work.log" | tail -1 | tr -d '#')
  echo "  fuzz_$target: ${runs:-?} inputs in ${FUZZ_SECONDS}s, corpus $before -> $(ls "$work" | wc -l)"
  rm -rf "$work" "$work.log"
}
fuzz_all() {
  local out target failed=0
  out=$(mktemp -d)
  for target in frame ps_messages store_payloads cluster_spec checkpoint; do
    while (( $(jobs -rp | wc -l) >= JOBS )); do wait -n || true; done
    ( fuzz_one "$target" >"$out/$target" 2>&1 || touch "$out/$target.failed" ) &
  done
  wait
  for target in frame ps_messages store_payloads cluster_spec checkpoint; do
    cat "$out/$target"
    [[ ! -e "$out/$target.failed" ]] || failed=1
  done
  rm -rf "$out"
  return $failed
}
timed fuzzing fuzz_all
echo "sanitize: clean"
timed_summary
