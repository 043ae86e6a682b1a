#!/usr/bin/env bash
# pip install, as a PyTorch user does it: into VENV, a venv that already has
# torch (and nothing of Tandem's), `pip install SOURCE_DIR` builds the
# package against that torch; then the venv's own `tandem` launcher runs a
# Horovod-style script with the venv's python on 2 workers, and they end
# with equal parameters. Slow (it compiles Tandem, about 20 minutes on 2
# cores), so not part of ctest by default: -DTANDEM_TEST_PIP_INSTALL=ON.
set -euo pipefail
SOURCE_DIR=$1
VENV=$2
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
"$VENV/bin/python" -c "import torch" || { echo "FAIL: $VENV has no torch to build against"; exit 1; }
if "$VENV/bin/python" -c "import tandem" 2>/dev/null; then "$VENV/bin/pip" uninstall -y -q tandem; fi
start=$(date +%s)
# At most 2 compile jobs, as every build here (ninja would take cores + 2).
CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2} "$VENV/bin/pip" install --progress-bar off "$SOURCE_DIR" > "$WORK/pip.log" 2>&1 || { tail -60 "$WORK/pip.log"; exit 1; }
echo "pip install: $(( $(date +%s) - start )) s"
bash "$SOURCE_DIR/tests/python/venv_launcher_check.sh" "$VENV" "$SOURCE_DIR" "pip install"
