#!/usr/bin/env bash
# Issue 33's speed goal: emulated ResNet-152 on K80s (profiles/
# resnet152-k80-b32.json: 533 + 1,067 ms a step at batch 32), 8 hosts with
# one worker each and a PS on every host, 1 Gbit/s links, float32:
#   sync     every step's gradients pushed and the model pulled (STEPS
#            measured after 3 warm-up steps)
#   diloco   --local-steps H (50): one exchange per H steps; the window is
#            one whole round, H steps ending with its exchange (the first
#            round is the warm-up)
#   streaming  the same with --fragments F (5) --fragment-delay D (1): one
#            fragment's exchange every H/F steps, hidden behind the next D
# Compute utilisation is the emulated GPU's busy share of a step
# (forward+backward over the step, the mean over workers), beside the
# comm-bound optimum's, both from the lab's report; for DiLoCo the lab
# spreads one exchange over H steps (docs/planner.md).
# This machine cannot carry 8 hosts' 1 Gbit/s in real time: DILATION (4)
# slows the emulation so it can.
# Needs root (tandem lab). Usage: sudo bench/lab_diloco.sh [OUT] [PARTS]
#   PARTS="sync diloco"  STEPS=10  H=50  F=5  D=1  DILATION=4
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/bench-lab-diloco}
PARTS=${2:-"sync diloco"}
STEPS=${STEPS:-10}
H=${H:-50}
DILATION=${DILATION:-4}
TANDEM=${TANDEM:-build/tandem}
source bench/lab_common.sh
mkdir -p "$OUT"
TRAIN="--model resnet152 --dataset synthetic --synthetic-shape 3x224x224 --synthetic-size 256
       --emulate-compute profiles/resnet152-k80-b32.json --batch-size 32"
LAB="--hosts 8 --workers-per-host 1 --ps 8 --link-mbps 1000 --dilation $DILATION"
names=()
for part in $PARTS; do
  case $part in
    # shellcheck disable=SC2086  # the flags split on purpose
    sync) lab_run sync $LAB --warmup-steps 3 -- $TRAIN --max-steps $((STEPS + 3)) ;;
    # shellcheck disable=SC2086
    diloco) lab_run diloco $LAB --warmup-steps "$H" -- $TRAIN --max-steps $((2 * H)) --local-steps "$H" ;;
    # shellcheck disable=SC2086
    # The second round measured, not the run's last step (which exchanges the whole model at once).
    streaming) lab_run streaming $LAB --warmup-steps "$H" --measure-steps "$H" -- $TRAIN --max-steps $((2 * H + 10)) \
                 --local-steps "$H" --fragments "${F:-5}" --fragment-delay "${D:-1}" ;;
    *) echo "unknown part $part" >&2; exit 2 ;;
  esac
  names+=("$part")
done
python3 - "$OUT" "${names[@]}" <<'PY' | tee "$OUT/table.txt"
import json, os, statistics, sys
out, names = sys.argv[1], sys.argv[2:]
print(f"{'run':<8} {'step ms':>8} {'fwd+bwd ms':>10} {'update ms':>9} {'utilisation':>11} {'optimum ms':>10} "
      f"{'optimum util.':>13} {'of optimum':>10} {'link MB/step':>12}")
for name in names:
    r = json.load(open(os.path.join(out, name, "lab.json")))
    m, o = r["measured"], r["optimum"]
    workers = [t for t in r["tasks"] if "breakdown_ms" in t]
    compute = statistics.mean(t["breakdown_ms"].get("forward_backward", 0) for t in workers)
    update = statistics.mean(t["breakdown_ms"].get("update", 0) for t in workers)
    print(f"{name:<8} {m['step_ms']:>8.1f} {compute:>10.1f} {update:>9.1f} {m['compute_utilisation']:>11.3f} "
          f"{o['step_ms']:>10.1f} {o['compute_utilisation']:>13.3f} {o['step_ms'] / m['step_ms']:>10.3f} "
          f"{m['busiest_worker_link_bytes_per_step'] / 1e6:>12.2f}")
PY
