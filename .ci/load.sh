# CPU load for the test command: busy shell loops, three per CPU unless
# LOAD_PER_CPU says otherwise (.ci/run: one), stopped by their process ids.
# Sourced by .ci/run and .ci/stress: the suite must hold on a machine that
# busy.
load_pids=()
start_load() {
  local n
  n=$(( $(nproc 2>/dev/null || echo 2) * ${LOAD_PER_CPU:-3} ))
  for _ in $(seq "$n"); do
    (while :; do :; done) &
    load_pids+=($!)
  done
  echo "beside $n busy loops (pids ${load_pids[*]})"
}
stop_load() {
  if [ ${#load_pids[@]} -gt 0 ]; then
    kill "${load_pids[@]}" 2>/dev/null || true
    wait "${load_pids[@]}" 2>/dev/null || true
  fi
  load_pids=()
}
