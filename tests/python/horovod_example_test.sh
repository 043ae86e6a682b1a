#!/usr/bin/env bash
# examples/python/horovod_mnist.py, a Horovod script in the layout of
# Horovod's own MNIST example, on 2 workers: plain, with fp16 compression,
# with the mixed-precision synchronize()/skip_synchronize() loop, and with
# --use-adasum. Each must learn (150 batches of Fashion-MNIST; chance is 0.1).
set -euo pipefail
BUILD_DIR=$1
SOURCE_DIR=$2
PY=$3
DATA=/usr/share/datasets/fashion-mnist
[[ -f $DATA/train-images-idx3-ubyte.gz ]] || { echo "FAIL: $DATA is missing (scripts/setup.sh installs it)"; exit 1; }
export PYTHONPATH="$BUILD_DIR/python${PYTHONPATH:+:$PYTHONPATH}"
EXAMPLE="$SOURCE_DIR/examples/python/horovod_mnist.py"
for flags in "" "--fp16-allreduce" "--use-mixed-precision --gradient-predivide-factor 2" "--use-adasum"; do
  # shellcheck disable=SC2086
  out=$("$BUILD_DIR/tandem" launch --workers 2 -- "$PY" "$EXAMPLE" --epochs 1 --max-batches 150 $flags 2>&1) \
    || { echo "FAIL: horovod_mnist.py $flags"; echo "$out"; exit 1; }
  accuracy=$(sed -n 's/.*test accuracy \([0-9.]*\).*/\1/p' <<< "$out" | tail -n 1)
  echo "horovod_mnist.py ${flags:-(plain)}: test accuracy $accuracy"
  "$PY" -c "import sys; sys.exit(0 if float('${accuracy:-0}') > 0.6 else 1)" \
    || { echo "FAIL: horovod_mnist.py $flags reached only '${accuracy}'"; echo "$out"; exit 1; }
done
echo "PASS"
