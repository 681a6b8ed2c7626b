#!/usr/bin/env bash
# A release run, or a cold-then-warm pair, on the GPU machine, that outlives the device call it starts in
# and resumes across calls. From the repository root, after `source benchmarks/gpu_setup.sh`:
#
#   RUN=/tmp/rel [STEPS="cold warm"] [RELEASE=carry/h100.jsonl] [DEVICES=cuda:0] [LIMIT=40 | ROWS=L1-1,L2-5] \
#       [UNTIL_S=540] [KEEP=$OUT] [TREE=.] [EXTRA="--baselines cuda_graph"] bash benchmarks/release_run.sh
#
# Each step is benchmarks/release_eval.py into RUN/<step>. `cold` first empties the build cache
# ($TMPDIR/cudal1-extensions) unless it is resuming. `warm` (and `warm2`, a repeat) measures the same rows on the cache a cold run
# left (RUN/cold, or FROM=dir), handed out largest first by what they cost there (COSTS=0: in the release's
# order), and compares its figures with it (AGREE=0: not).
# The steps run in a driver started in its own session (setsid), which the end of a device call does not
# stop: this script starts the driver (unless one runs for RUN), then waits for it until UNTIL_S seconds
# have passed: exit 0 when every step is done, 3 while it still runs (call again, on the same machine, to
# wait on). On a fresh machine, with RUN carried back, it resumes the steps where they stopped. Each run
# segment's wall goes into RUN/<step>/calls.jsonl (release_bench.py sums them).
# KEEP=dir copies RUN's small files to dir/<RUN's name> at the end of every call (e.g. $OUT, to bring
# them back). TREE=dir runs that tree's release_eval.py with PYTHONPATH=dir (regression.sh measures an older
# tree so; paths in EXTRA are read from TREE). DRY_RUN=1 prints the steps' commands and runs nothing. REAP=0: see run_step.
set -uo pipefail
: "${RUN:?RUN=folder of the run}"
# absolute, since each run starts in its tree's folder: a worker's fork server, started with `python -m`,
# imports the package of the folder it starts in before PYTHONPATH's
RUN=$(realpath -m "$RUN")
STEPS=${STEPS:-cold warm}
RELEASE=$(realpath -m "${RELEASE:-carry/h100.jsonl}")
TREE=$(realpath -m "${TREE:-.}")
FROM=$(realpath -m "${FROM:-$RUN/cold}")
CACHE=${TMPDIR:-/tmp}/cudal1-extensions

command_for() {  # step: release_eval.py's command line for it
  local args=(--release "$RELEASE" --devices "${DEVICES:-cuda:0}" --out "$RUN/$1")
  [ -n "${LIMIT:-}" ] && args+=(--limit "$LIMIT")
  [ -n "${ROWS:-}" ] && args+=(--rows "$ROWS")
  if [ "${1#warm}" != "$1" ]; then  # warm, warm2...: the cold run's rows in its costs' order (largest first), compared with it
    [ "${COSTS:-1}" = 1 ] && args+=(--costs-from "$FROM/results.jsonl")
    [ "${AGREE:-1}" = 1 ] && args+=(--agree-with "$FROM/results.jsonl")
  fi
  # shellcheck disable=SC2086  # EXTRA: several options
  echo python3 benchmarks/release_eval.py "${args[@]}" ${EXTRA:-}
}

count() { if [ -f "$1/results.jsonl" ]; then grep -c . "$1/results.jsonl"; else echo 0; fi; }

run_step() {  # step: one segment of it, its wall appended to its calls.jsonl
  local dir=$RUN/$1 before after rc s e
  [ -f "$dir/done" ] && return 0
  mkdir -p "$dir"
  before=$(count "$dir")
  if [ "$1" = cold ] && [ "$before" = 0 ]; then rm -rf "$CACHE"; echo "build cache $CACHE emptied" >> "$dir/run.log"; fi
  s=$(date +%s.%N)
  # shellcheck disable=SC2046  # the command's words
  (cd "$TREE" && PYTHONPATH="$TREE${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1 $(command_for "$1")) >> "$dir/run.log" 2>&1
  rc=$?
  e=$(date +%s.%N)
  # workers and their builds left behind (own sessions; sandboxed uids from 200000 up): a later step's build
  # of the same program beside a stray ninja would damage its deps log. REAP=0 leaves them (a shared machine)
  if [ "${REAP:-1}" = 1 ]; then
    pkill -9 -f 'cudal1[.]evaluator[.]worker'
    ps -eo pid=,uid= | awk '$2 >= 200000 {print $1}' | xargs -r kill -9 2>/dev/null
  fi
  after=$(count "$dir")
  python3 -c "import json,sys; print(json.dumps({'wall_s': round(float(sys.argv[2]) - float(sys.argv[1]), 1), 'evaluations_before': int(sys.argv[3]), 'evaluations_after': int(sys.argv[4]), 'exit': int(sys.argv[5])}))" \
    "$s" "$e" "$before" "$after" "$rc" >> "$dir/calls.jsonl"
  [ "$rc" = 0 ] && touch "$dir/done"
  return "$rc"
}

drive() {  # every step in order; a step that fails stops the ones after it
  for step in $STEPS; do run_step "$step" || break; done
}

status() {
  for step in $STEPS; do
    printf '%s: %s evaluations%s\n' "$step" "$(count "$RUN/$step")" "$([ -f "$RUN/$step/done" ] && echo ', done')"
  done
  if [ -f "$RUN/warm/summary.json" ]; then
    python3 -c "import json,sys; print('agreement (warm against cold):', json.load(open(sys.argv[1])).get('agreement'))" \
      "$RUN/warm/summary.json"
  fi
}

all_done() { for step in $STEPS; do [ -f "$RUN/$step/done" ] || return 1; done; }

if [ "${DRY_RUN:-0}" = 1 ]; then
  for step in $STEPS; do
    [ "$step" = cold ] && echo "rm -rf $CACHE  # unless $RUN/cold holds rows"
    echo "cd $TREE && PYTHONPATH=$TREE $(command_for "$step") >> $RUN/$step/run.log"
  done
  exit 0
fi
[ "${1:-}" = drive ] && { drive; exit; }
mkdir -p "$RUN"
if ! all_done && ! { [ -f "$RUN/driver.pid" ] && kill -0 "$(cat "$RUN/driver.pid")" 2>/dev/null; }; then
  setsid bash "$0" drive > "$RUN/driver.out" 2>&1 < /dev/null &
  echo $! > "$RUN/driver.pid"
  echo "release_run.sh: started the steps '$STEPS' of $RUN (pid $(cat "$RUN/driver.pid"))"
fi
end=$(( $(date +%s) + ${UNTIL_S:-540} ))
while ! all_done && kill -0 "$(cat "$RUN/driver.pid")" 2>/dev/null && [ "$(date +%s)" -lt "$end" ]; do sleep 2; done
status
if [ -n "${KEEP:-}" ]; then
  for step in $STEPS; do
    mkdir -p "$KEEP/$(basename "$RUN")/$step"
    cp -p "$RUN/$step"/{results.jsonl,summary.json,calls.jsonl,run.log} "$KEEP/$(basename "$RUN")/$step/" 2>/dev/null
  done
fi
all_done && exit 0
kill -0 "$(cat "$RUN/driver.pid")" 2>/dev/null && { echo "release_run.sh: still running; call again to wait"; exit 3; }
echo "release_run.sh: the driver stopped before every step was done (see $RUN/*/run.log)" >&2
exit 1
