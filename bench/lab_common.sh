# Helpers for the bench/lab_*.sh scenarios; source it after setting OUT and
# TANDEM. Each lab run writes OUT/NAME/lab.json (tandem lab's report); the
# scenario then folds them into OUT/results.json for tools/plot_lab.py.

lab_run() {  # name, lab flags..., --, train flags...
  local name=$1; shift
  echo "== $name: tandem lab $*" >&2
  "$TANDEM" lab "$@" --out "$OUT/$name" --overwrite >"$OUT/$name.log" 2>&1 || { tail -40 "$OUT/$name.log"; exit 1; }
  grep -E '^(step|compute|busiest|where it went|job):' "$OUT/$name.log" | sed 's/^/   /' >&2
}

# message_us N: this machine's fixed cost of one all-reduce among N local
# processes (a 4 KB buffer), in microseconds: what a bucket costs beyond its
# bytes here, for the lab's prediction (--message-us).
message_us() {
  "$TANDEM" bench allreduce --workers "$1" --sizes 4K --json "$OUT/bench-allreduce-$1.json" >/dev/null 2>&1
  python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))['rows'][0]['seconds'] * 1e6, 1))" \
    "$OUT/bench-allreduce-$1.json"
}

# results NAME...: one row per run, with its layout label (from LABEL_<name>).
collect() {
  python3 - "$OUT" "$@" <<'PY'
import json, os, sys
out, names = sys.argv[1], sys.argv[2:]
rows = []
for name in names:
    r = json.load(open(os.path.join(out, name, "lab.json")))
    c = r["cluster"]
    rows.append({"name": name, "layout": os.environ.get("LABEL_" + name.replace("-", "_"), name),
                 "hosts": c["worker_hosts"], "workers": c["worker_hosts"] * c["workers_per_host"],
                 "servers": c["servers"], "mode": c["mode"], "dilation": c["dilation"],
                 "link_mbit_per_s": c["link_mbit_per_s"],
                 "measured_step_ms": r["measured"]["step_ms"], "measured_samples_per_sec": r["measured"]["samples_per_sec"],
                 "optimum_step_ms": r["optimum"]["step_ms"], "optimum_samples_per_sec": r["optimum"]["samples_per_sec"],
                 "predicted_step_ms": r["predicted"]["step_ms"], "predicted_samples_per_sec": r["predicted"]["samples_per_sec"],
                 "busiest_link_mb_per_step": r["measured"]["busiest_worker_link_bytes_per_step"] / 1e6,
                 # packets the links' full queues dropped, all links, whole run
                 "dropped_packets": sum(l.get("run_dropped_packets_sent", 0) + l.get("run_dropped_packets_received", 0)
                                        for l in r["links"]),
                 "ratios": r["ratios"], "tasks": r["tasks"]})
json.dump(rows, open(os.path.join(out, "results.json"), "w"), indent=2)
print(f"{'run':<16} {'workers':>7} {'w0 step ms':>10} {'samples/s':>10} {'predicted':>10} {'meas/pred':>9} "
      f"{'optimum':>9} {'of opt.':>8} {'link MB/step':>12} {'drops':>7}")
for r in rows:
    q = r["ratios"]
    print(f"{r['name']:<16} {r['workers']:>7} {r['measured_step_ms']:>10.1f} {r['measured_samples_per_sec']:>10.1f} "
          f"{r['predicted_samples_per_sec']:>10.1f} {q['measured_over_predicted_time']:>9.3f} "
          f"{r['optimum_samples_per_sec']:>9.1f} {q['measured_over_optimum_samples']:>8.3f} {r['busiest_link_mb_per_step']:>12.2f} "
          f"{r['dropped_packets']:>7}")
by_layout = {}
for r in rows:
    by_layout.setdefault(r["layout"], []).append(r["ratios"]["measured_over_optimum_samples"])
if any(len(v) > 1 for v in by_layout.values()):
    print(f"{'layout':<24} {'runs':>4} {'of opt. median':>14} {'min':>6} {'max':>6}")
    for layout, v in by_layout.items():
        v = sorted(v)
        mid = len(v) // 2
        median = v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2
        print(f"{layout:<24} {len(v):>4} {median:>14.3f} {v[0]:>6.3f} {v[-1]:>6.3f}")
print("meas/pred: the job's time per sample, measured over the planner's prediction of Tandem's path;")
print("of opt.: measured samples/s over the comm-bound optimum's; drops: packets the full link queues dropped (run)")
PY
}
