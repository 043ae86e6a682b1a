#!/usr/bin/env bash
# Image folder input pipeline against the train step's demand, ResNet-50 at
# 224x224 (issue 11). One run each, about 2 minutes on 2 cores:
# 1. decode rate: `--prefetch-threads 0` builds each batch inline, so the
#    step breakdown's input_wait is Dataset::getBatch itself (read, JPEG
#    decode, RandomResizedCrop + flip, normalise) on one core; a tiny MLP
#    adds next to nothing.
# 2. demand: ResNet-50 forward + backward on synthetic 3x224x224 batches.
# 3. both together: ResNet-50 on the folder with one prefetch thread, and
#    how much of its step is left waiting for input.
# Images: 200 JPEGs of 400x350 (ImageNet's typical size), 4:2:0, quality 90,
# written by tests/support/make_image_folder.py (16 encoded, the rest copies).
# Usage: bench/image_input.sh [build dir]    THREADS=2 (torch threads)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
TANDEM=${TANDEM:-$BUILD/tandem}
THREADS=${THREADS:-2}
OUT=${OUT:-$(mktemp -d /tmp/tandem-image-input.XXXXXX)}
source bench/common.sh
IMAGES=$OUT/images
.venv/bin/python tests/support/make_image_folder.py "$IMAGES" --classes 4 --train-per-class 50 --val-per-class 2 \
  --size 400x350 --jpeg-only --subsample 420 --quality 90 --distinct 16
common=(--image-size 224 --eval-every 100000 --progress plain)
run decode "$TANDEM" train --model mlp --mlp-widths 8 --dataset imagefolder --data-dir "$IMAGES" "${common[@]}" \
  --batch-size 32 --max-steps 8 --prefetch-threads 0 --threads 1
run demand "$TANDEM" train --model resnet50 --dataset synthetic --synthetic-shape 3x224x224 --batch-size 8 \
  --max-steps 4 --threads "$THREADS" --progress plain
run folder "$TANDEM" train --model resnet50 --dataset imagefolder --data-dir "$IMAGES" "${common[@]}" \
  --batch-size 8 --max-steps 4 --threads "$THREADS" --prefetch-threads 1
python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
s = {n: json.load(open(f"{out}/{n}/summary.json")) for n in ("decode", "demand", "folder")}
decode = s["decode"]["step_breakdown"]
per_core = 32 / decode["input_wait"]
need = s["demand"]["samples_per_sec"]
f = s["folder"]["step_breakdown"]
print(f"decode+augment, 1 core:          {per_core:8.1f} images/s ({1e3 / per_core:.2f} ms/image)")
print(f"resnet50 fwd+bwd demand:         {need:8.1f} samples/s (synthetic, {s['demand'].get('threads')} threads)")
print(f"cores of decoding per trainer:   {need / per_core:8.3f}  (input keeps up on one prefetch thread: {per_core >= need})")
print(f"resnet50 on the folder:          {s['folder']['samples_per_sec']:8.1f} samples/s, "
      f"input_wait {1e3 * f['input_wait']:.1f} ms of a {1e3 * f['step']:.1f} ms step "
      f"({100 * f['input_wait'] / f['step']:.1f}%)")
print(f"folder / synthetic speed:        {s['folder']['samples_per_sec'] / need:8.3f}")
PY
