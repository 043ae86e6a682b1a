#!/usr/bin/env bash
# Installs, builds and runs the whole test suite, then the sanitizer and
# fuzzing runs of the torch-free layers (scripts/sanitize.sh). Each part
# prints what it took, so a slow CI run says where its time went.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/timed.sh
timed setup bash scripts/setup.sh
timed build bash scripts/build.sh
timed "main suite" bash -c 'cd build && ctest --output-on-failure --timeout 900 -j 2 "$@"' ctest "$@"
# Arguments select main-suite tests: a partial run skips the sanitizers.
if [[ $# -eq 0 ]]; then timed sanitizers bash scripts/sanitize.sh; fi
timed_summary
