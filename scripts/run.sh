#!/usr/bin/env bash
# Installs, builds and runs Tandem's default job: a small real distributed
# training run on Fashion-MNIST, two worker processes with synchronous
# all-reduce. Extra arguments go to `tandem train`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh --target tandem
# --overwrite: each run of the demo starts afresh (a rerun into the same
# --out would otherwise resume it, and find nothing left to do).
exec ./build/tandem launch --workers 2 -- --batch-size 32 --out runs/quickstart --overwrite "$@"
