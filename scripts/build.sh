#!/usr/bin/env bash
# Configures and builds Tandem into build/ (at most 2 jobs: LibTorch
# translation units are memory- and CPU-heavy), against the LibTorch of the
# torch wheel in the project's venv (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${TANDEM_BUILD_DIR:-build}
JOBS=${TANDEM_JOBS:-2}
source scripts/torch_env.sh
# Through ccache (Debian's, from setup.sh): a fresh clone on a machine that
# built the same sources before (CI's, after a developer's session)
# compiles only what changed. Cold, it costs a few percent.
if [[ ! -f "$BUILD_DIR/build.ninja" ]]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTANDEM_CCACHE=ON \
    "${TANDEM_TORCH_CMAKE_ARGS[@]}" ${TANDEM_CMAKE_ARGS:-}
fi
cmake --build "$BUILD_DIR" -j "$JOBS" "$@"
