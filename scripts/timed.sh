# Sourced: `timed NAME COMMAND...` runs COMMAND, records its wall time and
# returns its status; `timed_summary` prints every part's time and the total.
TIMED_PARTS=()
timed() {
  local name=$1 start=$SECONDS status=0; shift
  "$@" || status=$?
  TIMED_PARTS+=("$name: $((SECONDS - start)) s")
  echo "timed: $name took $((SECONDS - start)) s$( ((status == 0)) || echo ", and failed ($status)")"
  return $status
}
timed_summary() {
  printf 'timed: %s\n' "${TIMED_PARTS[@]}"
  echo "timed: total $SECONDS s"
}
