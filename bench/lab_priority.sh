#!/usr/bin/env bash
# Priority scheduling against backward order (issue 13, item 2): the same
# sync PS job with --priority off (pushes in the order backward completes
# chunks, every pull in before the step ends) and on (pushes queued behind a
# two-chunk window per server go first layers first; the next forward waits
# per stage for its own parameters). For each pair: the step, samples/s, the
# ratio to the comm-bound optimum, and the exposed communication per step
# (the mean over workers of waiting on the wire, inside or outside forward).
#   queue      resnet20 on a small GPU (10 + 20 ms), 100 Mbit/s, 2 hosts x 1
#              worker, one PS on host 0, 64 KiB chunks: worker 1's link queues
#   resnet110  ResNet-110 on a TITAN X (110 + 220 ms), 1 Gbit/s, 4 hosts x 2
#              workers, one PS on host 0 (the users' layout, sync)
#   inception  Inception v3 on K80s (0.70 + 1.40 s), 25 Gbit/s dilated by
#              DILATION, 4 hosts x 2 workers, a PS on every host
# The two 4-host jobs run flat (--hierarchical off), as when the table in
# docs/results/priority.md was first measured; hierarchical hosts now
# overlap the next forward too (docs/parameter-server.md, "Priority scheduling").
# Needs root (tandem lab). Usage: sudo bench/lab_priority.sh [OUT] [PARTS]
#   PARTS="queue resnet110 inception"  STEPS=20  DILATION=4
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/bench-lab-priority}
PARTS=${2:-"queue resnet110 inception"}
STEPS=${STEPS:-20}
DILATION=${DILATION:-4}
TANDEM=${TANDEM:-build/tandem}
source bench/lab_common.sh
mkdir -p "$OUT"
names=()
pair() {  # name, lab flags..., --, train flags...
  local name=$1; shift
  for p in off on; do
    lab_run "$name-$p" "$@" --priority "$p"
    names+=("$name-$p")
  done
}
for part in $PARTS; do
  case $part in
    queue)
      pair queue --hosts 2 --ps 1 --link-mbps 100 -- --model resnet20 --dataset synthetic \
        --synthetic-shape 3x32x32 --emulate-compute profiles/test-gpu-resnet20.json --batch-size 64 \
        --ps-chunk-mb 0.0625 --max-steps $((STEPS + 3)) --seed 3 ;;
    resnet110)
      pair resnet110 --hosts 4 --workers-per-host 2 --ps 1 --link-mbps 1000 -- --model resnet110 \
        --dataset synthetic --synthetic-shape 3x32x32 --emulate-compute profiles/resnet110-titanx-b128.json \
        --batch-size 128 --max-steps $((STEPS + 3)) --hierarchical off ;;
    inception)
      pair inception --hosts 4 --workers-per-host 2 --ps 4 --link-mbps 25000 --dilation "$DILATION" \
        --warmup-steps 2 -- --model inception_v3 --dataset synthetic --synthetic-shape 3x299x299 \
        --synthetic-size 2000 --emulate-compute profiles/inception_v3-k80-b64.json --batch-size 64 \
        --max-steps $((STEPS / 4 + 2)) --hierarchical off ;;
    *) echo "unknown part $part" >&2; exit 2 ;;
  esac
done
python3 - "$OUT" "${names[@]}" <<'PY' | tee "$OUT/table.txt"
import json, os, statistics, sys
out, names = sys.argv[1], sys.argv[2:]
rows = {}
print(f"{'run':<16} {'step ms':>8} {'samples/s':>10} {'of opt.':>8} {'exposed ms':>10}")
for name in names:
    r = json.load(open(os.path.join(out, name, "lab.json")))
    tasks = [t for t in r["tasks"] if t["task"].startswith("worker")]
    exposed = statistics.mean(t["breakdown_ms"]["exposed_comm"] for t in tasks)
    rows[name] = {"step_ms": r["measured"]["step_ms"], "samples_per_sec": r["measured"]["samples_per_sec"],
                  "of_optimum": r["ratios"]["measured_over_optimum_samples"], "exposed_comm_ms": exposed,
                  "optimum_step_ms": r["optimum"]["step_ms"]}
    print(f"{name:<16} {r['measured']['step_ms']:>8.1f} {r['measured']['samples_per_sec']:>10.1f} "
          f"{rows[name]['of_optimum']:>8.3f} {exposed:>10.1f}")
for name in names:
    if name.endswith("-on") and name[:-3] + "-off" in rows:
        on, off = rows[name], rows[name[:-3] + "-off"]
        print(f"{name[:-3]}: exposed communication {off['exposed_comm_ms']:.1f} -> {on['exposed_comm_ms']:.1f} ms a step "
              f"({on['exposed_comm_ms'] / max(off['exposed_comm_ms'], 1e-9):.2f}x), samples/s "
              f"x{on['samples_per_sec'] / off['samples_per_sec']:.3f}")
json.dump(rows, open(os.path.join(out, "results.json"), "w"), indent=2)
PY
