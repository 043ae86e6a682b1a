#!/usr/bin/env bash
# The check both install tests end with: VENV's own `tandem` launcher, with
# no build tree on any path, runs a Horovod-style script with the venv's
# python (by name) on 2 workers, and they end with equal parameters.
# Usage: tests/python/venv_launcher_check.sh VENV SOURCE_DIR WHAT
set -euo pipefail
# Absolute: the check runs in a directory of its own.
VENV=$(cd "$1" && pwd)
SOURCE_DIR=$(cd "$2" && pwd)
WHAT=$3
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
[[ -x "$VENV/bin/tandem" ]] || { echo "FAIL: $WHAT put no tandem launcher in $VENV/bin"; exit 1; }
cd "$WORK"
env -u PYTHONPATH PATH="$VENV/bin:/usr/bin:/bin" tandem --version | head -3
env -u PYTHONPATH PATH="$VENV/bin:/usr/bin:/bin" tandem launch --workers 2 -- \
  python "$SOURCE_DIR/tests/python/train_mlp.py" --out "$WORK/two" > "$WORK/launch.log" 2>&1 \
  || { cat "$WORK/launch.log"; exit 1; }
"$VENV/bin/python" - "$WORK" "$WHAT" <<'PY'
import sys
import torch
work, what = sys.argv[1:]
a, b = torch.load(f"{work}/two/rank0.pt"), torch.load(f"{work}/two/rank1.pt")
assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), "the two workers' parameters differ"
print(f"ok: tandem from {what} trained on 2 workers, {len(a)} tensors equal on both")
PY
