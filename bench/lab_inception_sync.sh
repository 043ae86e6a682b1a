#!/usr/bin/env bash
# Seed scenario 2 (issue 12): synchronous Inception v3 on K80s, 25 Gbit/s
# host links. The users' report (TensorFlow 1, one PS per host, 16 GPUs a
# host): 17.5 ... 322.8 images/s at 1 ... 128 GPUs, 14% efficiency at 128.
#   lab      Tandem's recommended layout (ring all-reduce, 25 MB buckets) on
#            1, 2, 4 and 8 emulated hosts x 2 workers, links and compute
#            dilated by DILATION (this machine cannot carry 8 x 25 Gbit/s)
#   planner  Tandem's predicted path at 1-128 GPUs, 16 a host; the tf1-ps
#            model of the users' layout, with round-robin and greedy
#            variable placement
# Writes OUT/results.json (lab) and OUT/plan.json (planner and the users'
# figures); plot: tools/plot_lab.py inception OUT/results.json OUT/plan.json PNG.
# Needs root (tandem lab). Usage: sudo bench/lab_inception_sync.sh [OUT] [HOSTS]
#   DILATION=2  STEPS=4 (measured, after 2 warm-up steps)
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-runs/bench-lab-inception}
HOSTS=${2:-"1 2 4 8"}
DILATION=${DILATION:-2}
STEPS=${STEPS:-4}
TANDEM=${TANDEM:-build/tandem}
PROFILE=profiles/inception_v3-k80-b64.json
source bench/lab_common.sh
mkdir -p "$OUT"
names=()
for h in $HOSTS; do
  lab_run inception-$h --hosts "$h" --workers-per-host 2 --link-mbps 25000 --dilation "$DILATION" --warmup-steps 2 \
    --message-us "$(message_us $((2 * h)))" -- \
    --model inception_v3 --dataset synthetic --synthetic-shape 3x299x299 --synthetic-size 2000 \
    --emulate-compute "$PROFILE" --batch-size 64 --max-steps $((STEPS + 2))
  export "LABEL_inception_$h=Tandem: all-reduce"
  names+=(inception-$h)
done
collect "${names[@]}"

GPUS=1,2,4,8,16,32,64,128
plan() { "$TANDEM" plan --profile "$PROFILE" --gpus $GPUS --workers-per-host 16 --link-gbps 25 --json "$@"; }
plan --layout allreduce >"$OUT/plan-tandem.json"
plan --layout tf1-ps --tf1-placement round-robin >"$OUT/plan-tf1-rr.json"
plan --layout tf1-ps --tf1-placement greedy >"$OUT/plan-tf1-greedy.json"
python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
load = lambda n: json.load(open(os.path.join(out, n)))["rows"]
users = [17.5, 34.6, 62.6, 94.8, 99.1, 140.7, 183.5, 322.8]
gpus = [1, 2, 4, 8, 16, 32, 64, 128]
rr, greedy, tandem = load("plan-tf1-rr.json"), load("plan-tf1-greedy.json"), load("plan-tandem.json")
plan = {"single_images_per_sec": 64 / 2.0984,
        "users": {"gpus": gpus, "images_per_sec": users},
        "tf1_ps": {"images_per_sec": [r["samples_per_sec"] for r in rr]},
        "tf1_ps_greedy": {"images_per_sec": [r["samples_per_sec"] for r in greedy]},
        "tandem": {"gpus": gpus, "images_per_sec": [r["samples_per_sec"] for r in tandem],
                   "efficiency": [r["efficiency"] for r in tandem], "layout": "ring all-reduce, 25 MB buckets"}}
json.dump(plan, open(os.path.join(out, "plan.json"), "w"), indent=2)
print(f"{'GPUs':>5} {'users':>8} {'tf1 rr':>8} {'(err)':>7} {'tf1 greedy':>10} {'(err)':>7} {'Tandem':>8} {'effic.':>7}")
for i, g in enumerate(gpus):
    a, b = rr[i]["samples_per_sec"], greedy[i]["samples_per_sec"]
    print(f"{g:>5} {users[i]:>8.1f} {a:>8.1f} {a / users[i] - 1:>+7.0%} {b:>10.1f} {b / users[i] - 1:>+7.0%} "
          f"{tandem[i]['samples_per_sec']:>8.1f} {tandem[i]['efficiency']:>7.1%}")
PY
