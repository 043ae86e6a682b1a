#!/usr/bin/env bash
# `tandem launch --hosts` over a real sshd (Debian's openssh-server, started
# here on two loopback hosts, 127.0.0.2 and 127.0.0.3, with keys made for
# the test, and stopped on exit, failed or not):
#  - 2 hosts x 2 workers train the same job, to the bit, as `tandem launch
#    --workers 4` (sums flat); by default they sum within each host first;
#  - a Horovod-API Python program, a rank on each host, with and without a
#    parameter server;
#  - a sync PS job with its server on the second host, the same job as
#    `tandem launch --ps 1`;
#  - a task killed on its host stops every task there and here (exit 1);
#  - SIGINT to launch reaches the remote tasks: they checkpoint, exit 130;
#  - launch killed outright leaves no task behind on any host;
#  - bad host lists exit 2 naming the entry; an unreachable host exits 1
#    with ssh's own words.
# Usage: tests/ssh/launch_hosts_test.sh BUILD_DIR PYTHON (one with torch)
set -euo pipefail
BUILD=$(cd "$1" && pwd)
PYTHON=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")  # before the cd below
SOURCE=$(cd "$(dirname "$0")/../.." && pwd)
test_name=launch_hosts_test
source "$SOURCE/tests/ssh/with_local_sshd.sh"
cd "$dir"
args=(--model mlp --mlp-widths 64,32 --dataset synthetic --synthetic-shape 1x28x28 --synthetic-size 4096
      --batch-size 16 --threads 1 --max-steps 30 --eval-every 0 --progress plain --seed 3 --checkpoint-every 0)
# Tasks of this test still running: the agents and what they run.
leftovers() { pgrep -f "$dir/run" -a | grep -v pgrep || true; }

read -r -a ssh_flags <<<"$SSH_FLAGS"
launch_hosts() { timeout 120 "$BUILD/tandem" launch "${ssh_flags[@]}" "$@"; }

# 1. All-reduce over two hosts, two workers each.
launch_hosts --hosts 127.0.0.2:2,127.0.0.3:2 -- "${args[@]}" --hierarchical off --out "$dir/run/flat" \
  >"$dir/flat.log" 2>&1 || { cat "$dir/flat.log"; fail "launch --hosts 127.0.0.2:2,127.0.0.3:2 failed"; }
"$BUILD/tandem" launch --workers 4 -- "${args[@]}" --out "$dir/run/local" >"$dir/local.log" 2>&1 ||
  { cat "$dir/local.log"; fail "the same job under tandem launch --workers 4 failed"; }
python3 "$SOURCE/tests/support/same_job.py" "$dir/run/flat" "$dir/run/local" --steps 30 --workers 4 ||
  { cat "$dir/flat.log"; fail "the job over two hosts differs from the one-host job"; }
grep -q "^\[worker 3@127.0.0.3\] " "$dir/flat.log" || { cat "$dir/flat.log"; fail "no line of worker 3 from 127.0.0.3"; }
sessions=$(grep -c "Accepted publickey" "$dir/sshd.log" || true)
((sessions >= 4)) || fail "sshd took $sessions session(s); each of the 4 tasks should have come over ssh"

launch_hosts --hosts 127.0.0.2:2,127.0.0.3:2 -- "${args[@]}" --out "$dir/run/hier" >"$dir/hier.log" 2>&1 ||
  { cat "$dir/hier.log"; fail "launch --hosts with host sums failed"; }
python3 - "$dir/run/hier/summary.json" "$dir/run/local/summary.json" <<'PY' || fail "host sums"
import json, sys
hier, local = (json.load(open(p)) for p in sys.argv[1:])
assert hier["strategy"]["hierarchical"] is True, "the workers did not sum within each host first"
for key in ("final_loss", "test_loss"):
    assert abs(hier[key] - local[key]) <= 1e-4 * max(1.0, abs(local[key])), (key, hier[key], local[key])
PY

# The Python package's program: PYTHONPATH travels with the rest of launch's environment.
PYTHONPATH=$BUILD/python launch_hosts --hosts 127.0.0.2:1,127.0.0.3:1 -- "$PYTHON" "$SOURCE/tests/ssh/two_hosts.py" \
  >"$dir/program.log" 2>&1 || { cat "$dir/program.log"; fail "a Python program over two hosts failed"; }
grep -q "^\[worker 1@127.0.0.3\] rank 1 of 2, alone on its host: the sum over both hosts is 3" "$dir/program.log" ||
  { cat "$dir/program.log"; fail "the program's rank 1 did not sum over both hosts"; }
PYTHONPATH=$BUILD/python launch_hosts --hosts 127.0.0.2:1,127.0.0.3:1 --ps 1 --ps-out "$dir/run/program-ps" -- \
  "$PYTHON" "$SOURCE/tests/ssh/two_hosts_ps.py" >"$dir/program-ps.log" 2>&1 ||
  { cat "$dir/program-ps.log"; fail "a Python program with a server over two hosts failed"; }
[[ $(grep -c "applied the mean gradient of both ranks" "$dir/program-ps.log") == 2 ]] ||
  { cat "$dir/program-ps.log"; fail "the program's ranks do not hold the server's update"; }

# 2. Sync PS: worker 0 on the first host, the server on the second.
launch_hosts --hosts 127.0.0.2:1,127.0.0.3:1 --ps 1 -- "${args[@]}" --ps-mode sync --out "$dir/run/ps" \
  >"$dir/ps.log" 2>&1 || { cat "$dir/ps.log"; fail "launch --hosts --ps 1 failed"; }
"$BUILD/tandem" launch --workers 2 --ps 1 -- "${args[@]}" --ps-mode sync --out "$dir/run/ps-local" \
  >"$dir/ps-local.log" 2>&1 || { cat "$dir/ps-local.log"; fail "tandem launch --ps 1 failed"; }
python3 "$SOURCE/tests/support/same_job.py" "$dir/run/ps" "$dir/run/ps-local" --steps 30 --workers 2 ||
  { cat "$dir/ps.log"; fail "the PS job over two hosts differs from the one-host job"; }
grep -q "^\[ps 0@127.0.0.3\] " "$dir/ps.log" || { cat "$dir/ps.log"; fail "the server did not run on 127.0.0.3"; }

# A long job, for the failure cases: started in the background, once worker 1 reports steps.
long=()
for arg in "${args[@]}"; do long+=("$([[ $arg == 30 ]] && echo 100000 || echo "$arg")"); done  # --max-steps
start_long() {
  "$BUILD/tandem" launch "${ssh_flags[@]}" --hosts 127.0.0.2:1,127.0.0.3:1 -- "${long[@]}" --log-every 5 \
    --out "$dir/run/$1" >"$dir/$1.log" 2>&1 &
  launch_pid=$!
  for _ in $(seq 300); do
    grep -q "^\[worker 1@127.0.0.3\].*step" "$dir/$1.log" && return 0
    kill -0 "$launch_pid" 2>/dev/null || { cat "$dir/$1.log"; fail "$1: the job ended before it trained"; }
    sleep 0.1
  done
  cat "$dir/$1.log"
  fail "$1: worker 1 reported no step within 30 s"
}
# Waits up to 20 s for launch; sets `status`.
await_launch() {
  for _ in $(seq 200); do kill -0 "$launch_pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$launch_pid" 2>/dev/null && { kill -9 "$launch_pid"; fail "$1: launch did not end within 20 s"; }
  status=0
  wait "$launch_pid" || status=$?
}
await_no_leftovers() {
  for _ in $(seq 150); do [[ -z $(leftovers) ]] && return 0; sleep 0.1; done
  leftovers
  fail "$1: tasks outlived their job"
}

# 3. Worker 1's trainer killed on its host: the job stops everywhere, exit 1.
start_long killed
trainer=""
for agent in $(pgrep -f "remote-task -- .*$dir/run/killed"); do
  child=$(pgrep -P "$agent" || true)
  [[ -n $child ]] && tr '\0' '\n' <"/proc/$child/environ" | grep -qx "TANDEM_HOST=127.0.0.3" && trainer=$child
done
[[ -n $trainer ]] || fail "killed: found no trainer of worker 1 on 127.0.0.3"
kill -9 "$trainer"
await_launch killed
((status == 1)) || { cat "$dir/killed.log"; fail "killed: launch exited $status, expected 1"; }
grep -q "worker 1 (pid [0-9]*) exited with status 137; the other tasks were stopped" "$dir/killed.log" ||
  { cat "$dir/killed.log"; fail "killed: launch did not name the killed worker"; }
await_no_leftovers killed

# 4. SIGINT to launch: forwarded over the agents' channel; every task checkpoints.
start_long interrupted
kill -INT "$launch_pid"
await_launch interrupted
((status == 130)) || { cat "$dir/interrupted.log"; fail "interrupted: launch exited $status, expected 130"; }
[[ -f $dir/run/interrupted/checkpoint.ckpt ]] ||
  { cat "$dir/interrupted.log"; fail "interrupted: worker 0 saved no checkpoint"; }
await_no_leftovers interrupted

# 5. launch killed outright: its ssh clients go, and each agent stops its task.
start_long orphaned
kill -9 "$launch_pid"
wait "$launch_pid" 2>/dev/null || true
await_no_leftovers orphaned

# 6. Bad input, and a host nobody serves.
expect_exit() {
  local want=$1 text=$2
  shift 2
  local got=0
  "$BUILD/tandem" launch "${ssh_flags[@]}" "$@" -- "${args[@]}" --out "$dir/run/bad" >"$dir/bad.log" 2>&1 || got=$?
  ((got == want)) || { cat "$dir/bad.log"; fail "launch $*: exit $got, expected $want"; }
  grep -qF -- "$text" "$dir/bad.log" || { cat "$dir/bad.log"; fail "launch $*: no '$text' in its output"; }
}
expect_exit 2 "entry '127.0.0.3:0' is not host or host:slots" --hosts 127.0.0.2:2,127.0.0.3:0
expect_exit 2 "--workers 5: the hosts have 4 slot(s) (127.0.0.2:2,127.0.0.3:2)" --workers 5 \
  --hosts 127.0.0.2:2,127.0.0.3:2
printf '127.0.0.2 slots=2\n127.0.0.3 slot=2\n' >"$dir/hostfile"
expect_exit 2 "--hostfile $dir/hostfile line 2: '127.0.0.3 slot=2'" --hostfile "$dir/hostfile"
expect_exit 1 "127.0.0.4 port $SSH_PORT: Connection refused" --hosts 127.0.0.2:1,127.0.0.4:1
await_no_leftovers "unreachable host"
echo "launch_hosts_test: passed ($sessions ssh sessions for the first job)"
