#!/usr/bin/env bash
# A release run that outlives the device call it starts in: `start` runs benchmarks/release_resume.sh for RUN
# in its own session (setsid), which the end of a device call does not stop, and returns at once; `wait`,
# in the same call or a later one on the same machine, waits until that run has written its calls.jsonl (its
# one call: the whole run's wall, no seams between device calls) or until UNTIL_S seconds have passed.
# A run cut at each call's limit and resumed in the next paid a start again at each call and started again
# the builds the limit had stopped: 107.7 s beyond its rows' own times over two calls, against 37.0 s as one
# run (docs/gpu-runs.md#2026-11-29-recheck-early).
#
#   RUN=/tmp/rel/cold EXTRA=--call-pace bash benchmarks/release_outlive.sh start
#   RUN=/tmp/rel/cold UNTIL_S=560 bash benchmarks/release_outlive.sh wait     # exit 0: done; 3: still running
#   RUN=/tmp/rel/warm AGREE_WITH=/tmp/rel/cold EXTRA=--call-pace bash benchmarks/release_outlive.sh start
#
# The machine must be called again before it is given back (a warm machine goes back when idle), or the run
# goes with it; RUN's files stay where release_resume.sh writes them, and RUN.out holds its output.
# RESUME names the script that runs (benchmarks/release_resume.sh; the tests give a stand-in).
set -uo pipefail
: "${RUN:?RUN=folder of the run}"
RESUME=${RESUME:-benchmarks/release_resume.sh}
case "${1:-}" in
  start)
    if [ -s "$RUN/calls.jsonl" ] || { [ -f "$RUN.pid" ] && kill -0 "$(cat "$RUN.pid")" 2>/dev/null; }; then
      echo "release_outlive.sh: $RUN is already running or done; a new run needs a new RUN" >&2; exit 2
    fi
    if [ -s "$RUN/results.jsonl" ]; then  # its wall would leave out the part before: no call of it was recorded
      echo "release_outlive.sh: $RUN holds rows of a run that stopped without its record; resume it with" \
        "benchmarks/release_resume.sh (which records each call's wall), or start a new RUN" >&2; exit 2
    fi
    mkdir -p "$RUN"
    # LIMIT_S bounds the run itself, not a call; release_resume.sh reads RUN, AGREE_WITH, EXTRA, COLD, RELEASE
    LIMIT_S=${LIMIT_S:-3000} setsid bash "$RESUME" > "$RUN.out" 2>&1 < /dev/null &
    echo $! > "$RUN.pid"
    echo "release_outlive.sh: started $RUN (pid $(cat "$RUN.pid")) at $(date -u +%T)"
    ;;
  wait)
    end=$(( $(date +%s) + ${UNTIL_S:-540} ))
    while [ ! -s "$RUN/calls.jsonl" ] && [ "$(date +%s)" -lt "$end" ]; do sleep 2; done
    n=$( [ -f "$RUN/results.jsonl" ] && grep -c . "$RUN/results.jsonl" || echo 0)
    if [ -s "$RUN/calls.jsonl" ]; then
      echo "release_outlive.sh: $RUN done, $n evaluations: $(tail -n 1 "$RUN/calls.jsonl")"; exit 0
    fi
    echo "release_outlive.sh: $RUN still running, $n evaluations so far; wait again"; exit 3
    ;;
  *)
    echo "usage: RUN=folder bash benchmarks/release_outlive.sh start|wait (see the head of this file)" >&2; exit 2
    ;;
esac
