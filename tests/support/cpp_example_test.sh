#!/usr/bin/env bash
# Installs Tandem from BUILD_DIR into a temporary prefix, builds
# examples/cpp against the installed package as a user would, and runs it
# under `tandem launch --workers 2`, under `tandem launch --ps 1 --workers 2`
# in ps-sync mode, and alone: the two workers must end with the parameters of
# one process on the combined batch either way. Then my_fit (tandem::fit:
# Tandem's loop over the example's own model, tensors and loss) learns alone,
# with all-reduce and with a parameter server, and writes its run directory.
set -euo pipefail
BUILD_DIR=$1
SOURCE_DIR=$2
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cmake --install "$BUILD_DIR" --prefix "$WORK/prefix" > "$WORK/install.log"
# The user's torch: the venv's, the one Tandem was built against.
TANDEM_VENV=${TANDEM_VENV:-$SOURCE_DIR/.venv}
source "$SOURCE_DIR/scripts/torch_env.sh"
# No TANDEM_PYTHON: the package remembers the LibTorch it was built against.
cmake -S "$SOURCE_DIR/examples/cpp" -B "$WORK/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$WORK/prefix" > "$WORK/configure.log" || { cat "$WORK/configure.log"; exit 1; }
grep -q "LibTorch .* at $(dirname "$("$TANDEM_PYTHON" -c 'import torch; print(torch.__file__)')")" "$WORK/configure.log" || {
  cat "$WORK/configure.log"; echo "FAIL: the example did not find the torch Tandem was built against"; exit 1; }
cmake --build "$WORK/build" -j 2 > "$WORK/build.log" || { cat "$WORK/build.log"; exit 1; }
TANDEM="$WORK/prefix/bin/tandem"
TRAINER="$WORK/build/my_trainer"

one=$("$TRAINER" --steps 40 --global-batch 32 2>&1) || { echo "$one"; exit 1; }
echo "--- one process"; echo "$one"
checksum() { sed -n "s/.*rank $1 of $2 (local $1 of $2) checksum \([0-9.e+-]*\).*/\1/p" <<< "$3" | head -n1; }
single=$(checksum 0 1 "$one")
for ps in 0 1; do
  two=$("$TANDEM" launch --ps $ps --workers 2 -- "$TRAINER" --steps 40 --global-batch 32 \
        --mode "$([[ $ps == 0 ]] && echo allreduce || echo ps-sync)" 2>&1) || { echo "$two"; exit 1; }
  echo "--- two workers, $ps parameter server(s)"; echo "$two"
  c0=$(checksum 0 2 "$two"); c1=$(checksum 1 2 "$two")
  [[ -n "$c0" && -n "$c1" && -n "$single" ]] || { echo "FAIL: a checksum line is missing"; exit 1; }
  # Replicas agree exactly; against one process, summation order differs.
  [[ "$c0" == "$c1" ]] || { echo "FAIL: worker checksums differ: $c0 vs $c1"; exit 1; }
  python3 - "$c0" "$single" <<'PY'
import sys
a, b = map(float, sys.argv[1:])
rel = abs(a - b) / abs(b)
print(f"two workers {a!r} vs one process {b!r}: relative difference {rel:.2e}")
sys.exit(0 if rel < 1e-5 else 1)
PY
done
first=$(sed -n 's/.*step 1 loss \([0-9.]*\).*/\1/p' <<< "$one"); last=$(sed -n 's/.*step 40 loss \([0-9.]*\).*/\1/p' <<< "$one")
python3 -c "import sys; sys.exit(0 if $last < $first else 1)" || { echo "FAIL: loss did not fall ($first -> $last)"; exit 1; }
FIT="$WORK/build/my_fit"
for launch in "" "launch --workers 2 --" "launch --ps 1 --workers 2 --"; do
  out="$WORK/fit-$(tr -c 'a-z0-9' '-' <<< "$launch")"
  if [[ -z "$launch" ]]; then log=$("$FIT" --steps 200 --out "$out" 2>&1) || { echo "$log"; exit 1; }
  else log=$("$TANDEM" $launch "$FIT" --steps 200 --out "$out" 2>&1) || { echo "$log"; exit 1; }; fi
  python3 - "$out" "${launch:-alone}" <<'PY'
import json, os, sys
out, how = sys.argv[1:]
summary = json.load(open(os.path.join(out, "summary.json")))
events = [f for f in os.listdir(out) if f.startswith("events.out.tfevents")]
print(f"my_fit {how}: mode {summary['mode']}, {summary['steps']} steps, test accuracy {summary['test_accuracy']:.4f}")
assert summary["model"] == "my-fit-net" and summary["steps"] == 200, summary
assert summary["test_accuracy"] > 0.85, f"my_fit {how} reached only {summary['test_accuracy']} (chance is 0.5)"
assert os.path.exists(os.path.join(out, "checkpoint.ckpt")) and events, os.listdir(out)
PY
done
echo "PASS"
