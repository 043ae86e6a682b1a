#!/usr/bin/env bash
# Installs, builds and runs the whole test suite, then the sanitizer and
# fuzzing runs of the torch-free layers (scripts/sanitize.sh). Each part
# prints what it took, so a slow CI run says where its time went.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/timed.sh
timed setup bash scripts/setup.sh
timed build bash scripts/build.sh
# Arguments select main-suite tests: a partial run skips the sanitizers.
if [[ $# -eq 0 ]]; then
  # The sanitizer trees build at nice 19 beside the main suite, on the CPU
  # its process tests leave idle while they wait on each other. Measured
  # here: the suite took 371 s with them against 366 s alone, and the two
  # builds ended 108 s after it instead of taking 195 s after it.
  mkdir -p build
  # set -m: its own process group, so that a failed suite stops its
  # compilers too. Not setsid: a new session is a new autogroup, which the
  # kernel gives an equal share whatever its nice (the suite then took 558 s).
  set -m
  nice -n 19 bash scripts/sanitize.sh build >build/sanitizer-builds.log 2>&1 &
  builds=$!
  set +m
  trap 'kill -- -$builds 2>/dev/null || true' EXIT
fi
timed "main suite" bash -c 'cd build && ctest --output-on-failure --timeout 900 -j 2 "$@"' ctest "$@"
if [[ $# -eq 0 ]]; then
  if ! timed "sanitizer builds, after the main suite" wait $builds; then
    tail -60 build/sanitizer-builds.log
    echo "test.sh: the sanitizer builds failed (build/sanitizer-builds.log)"
    exit 1
  fi
  trap - EXIT
  grep '^timed:' build/sanitizer-builds.log | sed 's/^timed:/timed: (beside the main suite)/'
  timed sanitizers bash scripts/sanitize.sh
fi
timed_summary
