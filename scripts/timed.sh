# Sourced: `timed NAME COMMAND...` runs COMMAND and records its wall time;
# `timed_summary` prints every part's time and the total.
TIMED_PARTS=()
timed() {
  local name=$1 start=$SECONDS; shift
  "$@"
  TIMED_PARTS+=("$name: $((SECONDS - start)) s")
  echo "timed: $name took $((SECONDS - start)) s"
}
timed_summary() {
  printf 'timed: %s\n' "${TIMED_PARTS[@]}"
  echo "timed: total $SECONDS s"
}
