#!/usr/bin/env bash
# Which CPU math is fastest for the MLP workload (256-4096-4096-256, batch
# 128, fp32, Adam), measured in one run, candidates interleaved:
#   openblas       Debian's OpenMP OpenBLAS, the default (scripts/setup.sh)
#   openblas-avx2  the same library told to use its Haswell (AVX2) kernels
#   blis           Debian's OpenMP BLIS (libblis4-openmp), with
#                  BLIS_NUM_THREADS set: BLIS ignores omp_set_num_threads
#   onednn         LibTorch's mkldnn_linear ops (GEMM table only: Tandem's
#                  models do not call them)
# 1. GEMM table: tandem_bench_sgemm (bench/sgemm_shapes.cpp) per candidate,
#    GFLOP/s of each layer's fwd / bwd_input / bwd_weight GEMM, best of the
#    repeats, with % of peak and the ratio to OpenBLAS.
# 2. End to end: `tandem train` on the MLP, steps/s and step breakdown, best
#    of the repeats, ratio to OpenBLAS.
# Each run loads its BLAS through LD_LIBRARY_PATH or an environment
# variable; system alternatives are left alone. Which library each run
# really used is printed (sgemm_'s file, from the benchmark; ldd of tandem).
# Usage: bench/blas_candidates.sh [build dir] [repeats]
#   THREADS="1 2"  thread counts     STEPS=60  training steps per run
#   TANDEM=path    the tandem binary (default: BUILD/tandem)
#   NO_INSTALL=1   do not apt-get install libblis4-openmp when missing
#   JOBS=1         compile jobs for building tandem_bench_sgemm
#   GEMM_ARGS="--trials 5 --min-seconds 0.1"  passed to tandem_bench_sgemm
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
REPEATS=${2:-3}
THREADS=${THREADS:-"1 2"}
STEPS=${STEPS:-60}
GEMM_ARGS=${GEMM_ARGS:-"--trials 5 --min-seconds 0.1"}
TANDEM=${TANDEM:-$BUILD/tandem}
SGEMM="$BUILD/bench/tandem_bench_sgemm"
LIBDIR=/usr/lib/x86_64-linux-gnu
OUT=$(mktemp -d /tmp/tandem-blas.XXXXXX)
trap 'rm -rf "$OUT"' EXIT

if ! dpkg-query -W -f='${Status}' libblis4-openmp 2>/dev/null | grep -q "install ok installed"; then
  if [[ -z ${NO_INSTALL:-} ]]; then
    SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO="sudo"
    echo "installing libblis4-openmp (the system BLAS alternative stays as it is)"
    # Installing registers an alternative at priority 80, below OpenBLAS,
    # so a manual or automatic libblas.so.3 selection does not move.
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends libblis4-openmp >/dev/null
  fi
fi
cmake --build "$BUILD" --target tandem_bench_sgemm -j "${JOBS:-1}" >/dev/null  # no-op when up to date
[[ -x $TANDEM ]] || { echo "no tandem binary at $TANDEM"; exit 1; }

# candidate -> environment of its runs (THREADS_NOW is substituted per run)
CANDIDATES=(openblas openblas-avx2)
declare -A ENVS=([openblas]="" [openblas-avx2]="OPENBLAS_CORETYPE=Haswell")
if [[ -e $LIBDIR/blis-openmp/libblas.so.3 ]]; then
  CANDIDATES+=(blis)
  ENVS[blis]="LD_LIBRARY_PATH=$LIBDIR/blis-openmp BLIS_NUM_THREADS=THREADS_NOW"
fi
envFor() { echo "${ENVS[$1]//THREADS_NOW/$2}"; }

TRAIN="--model mlp --mlp-widths 4096,4096 --dataset synthetic --synthetic-shape 256x1x1 --synthetic-classes 256
       --synthetic-size 8192 --optimizer adam --lr 1e-4 --batch-size 128 --max-steps $STEPS
       --eval-every 1000000 --log-every 1000 --progress plain --prefetch-threads 1"

echo "machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); repeats: $REPEATS (best of each)"
echo "tandem: $TANDEM"
for c in "${CANDIDATES[@]}"; do
  echo "  $c: env '$(envFor "$c" N)'; tandem loads $(env $(envFor "$c" 1) ldd "$TANDEM" | awk '/libblas.so.3/ {print $3}' | xargs readlink -f)"
done
echo "  (load averages now: $(cut -d' ' -f1-3 /proc/loadavg); other jobs on the cores lower every number)"

for t in $THREADS; do
  for r in $(seq "$REPEATS"); do
    for c in "${CANDIDATES[@]}"; do
      impls=blas; [[ $c == openblas ]] && impls=blas,onednn,onednn_dense  # oneDNN does not use libblas
      env $(envFor "$c" "$t") "$SGEMM" --threads "$t" --impls "$impls" --label "$c" $GEMM_ARGS \
        --json "$OUT/gemm-$t-$c-$r.json" >"$OUT/gemm-$t-$c-$r.log" 2>&1 || { cat "$OUT/gemm-$t-$c-$r.log"; exit 1; }
      env $(envFor "$c" "$t") "$TANDEM" train $TRAIN --threads "$t" --out "$OUT/train-$t-$c-$r" \
        >"$OUT/train-$t-$c-$r.log" 2>&1 || { cat "$OUT/train-$t-$c-$r.log"; exit 1; }
    done
  done
done

python3 - "$OUT" "$THREADS" "${CANDIDATES[*]}" <<'PY'
import glob, json, os, sys
out, threads, cands = sys.argv[1], sys.argv[2].split(), sys.argv[3].split()
for t in threads:
    gemm = {}  # column -> [(case key, best gflops)], peak
    peak, avail, used = 0, [], {}
    for c in cands:
        for path in sorted(glob.glob(f"{out}/gemm-{t}-{c}-[0-9]*.json")):
            j = json.load(open(path))
            peak = max(peak, j["peak_gflops"])
            avail.append(j["availability"])
            used[c] = f'{j["blas"]["sgemm_from"]} ({j["blas"].get("arch", "?")}, {j["blas"].get("threads", "?")} thr)'
            for row in j["cases"]:
                key = (row["layer"], row["gemm"], f'{row["m"]}x{row["n"]}x{row["k"]}')
                for impl in ("blas", "onednn", "onednn_dense"):
                    if impl not in row: continue
                    col = c if impl == "blas" else impl
                    g = gemm.setdefault(col, {})
                    g[key] = max(g.get(key, 0), row[impl]["gflops_best"])
    cols = [c for c in cands if c in gemm] + [c for c in ("onednn", "onednn_dense") if c in gemm]
    keys = list(gemm["openblas"].keys())
    print(f"\n== GEMM, {t} thread(s): best GFLOP/s, % of {peak:.0f} GFLOP/s peak, ratio to openblas "
          f"(sustained FMA availability {min(avail):.0%}-{max(avail):.0%})")
    for c, u in used.items(): print(f"   {c}: sgemm_ from {u}")
    print(f'{"layer":<10} {"gemm":<11} {"MxNxK":>14}' + "".join(f" {c:>22}" for c in cols))
    tot = {c: 0.0 for c in cols}
    flops_total = 0
    for key in keys:
        m, n, k = map(int, key[2].split("x"))
        f = 2 * m * n * k
        flops_total += f
        base = gemm["openblas"][key]
        line = f"{key[0]:<10} {key[1]:<11} {key[2]:>14}"
        for c in cols:
            g = gemm[c][key]
            tot[c] += f / g / 1e9
            line += f" {g:>7.1f} {100 * g / peak:>4.0f}% x{g / base:>5.2f}"
        print(line)
    line = f'{"one step, all GEMMs: ms":<37}'
    for c in cols:
        line += f" {1e3 * tot[c]:>7.1f} {100 * flops_total / tot[c] / 1e9 / peak:>4.0f}% x{tot['openblas'] / tot[c]:>5.2f}"
    print(line)

    print(f"\n== tandem train, MLP, batch 128, Adam, {t} thread(s): best of the repeats")
    base = None
    for c in cands:
        runs = [json.load(open(p)) for p in glob.glob(f"{out}/train-{t}-{c}-[0-9]*/summary.json")]
        rates = sorted(s["samples_per_sec"] / s["batch_size_per_worker"] for s in runs)
        best = max(runs, key=lambda s: s["samples_per_sec"])
        sps = best["samples_per_sec"] / best["batch_size_per_worker"]
        base = base or sps
        b = best["step_breakdown"]
        parts = " ".join(f"{k}={1e3 * v:.1f}" for k, v in b.items() if k != "step" and v > 0)
        print(f"   {c:<14} {sps:6.2f} steps/s x{sps / base:5.2f}  (all: {' '.join(f'{r:.2f}' for r in rates)})  "
              f"step {1e3 * b['step']:.1f} ms: {parts}")
        print(f"   {'':<14} tandem's own BLAS check: {best.get('blas', '?').split(' (')[0]}, "
              f"{best.get('blas_sgemm_gflops', 0):.1f} GFLOP/s on 512^3")
PY
