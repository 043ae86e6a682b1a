#!/usr/bin/env bash
# Installs, builds and runs the whole test suite, then the sanitizer and
# fuzzing runs of the torch-free layers (scripts/sanitize.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh
(cd build && ctest --output-on-failure --timeout 900 -j 2 "$@")
# Arguments select main-suite tests: a partial run skips the sanitizers.
if [[ $# -eq 0 ]]; then bash scripts/sanitize.sh; fi
