#!/usr/bin/env bash
# Installs, builds and runs Tandem's default job: a small real training run
# on Fashion-MNIST. Extra arguments go to `tandem train`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/build.sh --target tandem
exec ./build/tandem train --out runs/quickstart "$@"
