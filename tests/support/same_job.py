"""Whether two runs of one job ended alike: the same figures, to the bit,
in their summary.json files (a job under a cluster engine against the same
job under `tandem launch`, or one requeued and resumed against one that ran
through). Exits 1 naming the first figure that differs.

Usage: same_job.py RUN_A RUN_B [--steps N] [--workers N] [--keys k1,k2,...]
"""
import argparse
import json
import sys

parser = argparse.ArgumentParser()
parser.add_argument("a")
parser.add_argument("b")
parser.add_argument("--steps", type=int, help="the global step both must have reached")
parser.add_argument("--workers", type=int, help="the workers both must have had")
parser.add_argument("--keys", default="workers,global_step,final_loss,test_loss,test_accuracy")
args = parser.parse_args()
a, b = (json.load(open(f"{run}/summary.json")) for run in (args.a, args.b))
for key in args.keys.split(","):
    if a[key] != b[key]:
        sys.exit(f"{key}: {a[key]} in {args.a}, {b[key]} in {args.b}")
for key, want in (("global_step", args.steps), ("workers", args.workers)):
    if want is not None and a[key] != want:
        sys.exit(f"{key}: {a[key]} in {args.a}, expected {want}")
