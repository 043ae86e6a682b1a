#!/usr/bin/env bash
# A wheel made once (pip wheel SOURCE_DIR), installed as on every machine of
# a cluster: into VENV, a venv that already has the pinned torch and nothing
# of Tandem's, `pip install WHEEL` installs in seconds, without compiling;
# then the venv's own `tandem` launcher runs a Horovod-style script on 2
# workers, and they end with equal parameters. Not part of ctest (making
# the wheel compiles Tandem): run it by hand, as README.md's "A wheel for a
# cluster" says.
# Usage: tests/python/wheel_install_test.sh WHEEL VENV SOURCE_DIR
set -euo pipefail
WHEEL=$1
VENV=$2
SOURCE_DIR=$3
"$VENV/bin/python" -c "import torch" || { echo "FAIL: $VENV has no torch"; exit 1; }
if "$VENV/bin/python" -c "import tandem" 2>/dev/null; then "$VENV/bin/pip" uninstall -y -q tandem; fi
start=$(date +%s.%N)
"$VENV/bin/pip" install -q --no-deps "$WHEEL"
python3 -c "import time; print(f'pip install of the wheel: {time.time() - $start:.1f} s')"
bash "$SOURCE_DIR/tests/python/venv_launcher_check.sh" "$VENV" "$SOURCE_DIR" "the wheel"
