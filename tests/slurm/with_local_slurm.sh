# Sourced by the tests that need a real one-node Slurm: skips (exit 77)
# without root or Debian's Slurm, makes $dir (removed on exit), starts
# munged, slurmctld and slurmd there with local_slurm.sh, exports
# SLURM_CONF, and stops them on exit, failed or not. Defines fail().
# Set `test_name` before sourcing.
export PATH=$PATH:/usr/sbin:/sbin
if [[ $(id -u) -ne 0 ]] || ! command -v slurmctld >/dev/null || ! command -v srun >/dev/null; then
  echo "$test_name: skipped: starting Slurm's daemons needs root and Debian's slurmctld, slurmd, slurm-client, munge"
  exit 77
fi
slurm_helpers=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dir=$(mktemp -d)
chmod 755 "$dir"  # munged runs as the munge user, under it
trap '"$slurm_helpers/local_slurm.sh" stop "$dir/slurm" >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT
fail() { echo "$test_name: $*" >&2; exit 1; }
conf=$("$slurm_helpers/local_slurm.sh" start "$dir/slurm" | tail -n1)
export "${conf:?}"
