#!/usr/bin/env bash
# One call's share of a release run that takes longer than a device call may last: runs
# benchmarks/release_eval.py into RUN (resuming what an earlier call left there) for at most LIMIT_S
# seconds, then appends this call's wall clock to RUN/calls.jsonl, so benchmarks/release_bench.py can
# give the whole run's wall as the sum of its calls. The build cache is emptied only when RUN is new
# (a cold run); pass every call the same RUN, carried back and forth (device `carry`).
#
#   RUN=carry/rel/cold LIMIT_S=540 RELEASE=carry/h100.jsonl bash benchmarks/release_resume.sh
#   RUN=carry/rel/warm AGREE_WITH=carry/rel/cold LIMIT_S=540 RELEASE=carry/h100.jsonl bash benchmarks/release_resume.sh
#
# With AGREE_WITH the same rows as that run are evaluated (a warm rerun) and compared with it. COLD=0 keeps
# the build cache for a new RUN too (e.g. a cache filled by `build_floor.py --into-cache`, or the same rows
# on another number of GPUs: EXTRA="--devices cuda:0,cuda:1"); by default a new RUN without AGREE_WITH is cold.
# MIRROR=$OUT keeps a copy of RUN's files there as they grow (below).
set -uo pipefail
: "${RUN:?RUN=folder of the run}"
RELEASE=${RELEASE:-carry/h100.jsonl}
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}. PYTHONUNBUFFERED=1
if [ ! -f "$RUN/results.jsonl" ] && [ -z "${AGREE_WITH:-}" ] && [ "${COLD:-1}" = 1 ]; then
  rm -rf /tmp/cudal1-extensions
  echo "release_resume.sh: build cache emptied, a cold run (COLD=0 keeps it)" >&2
fi
mkdir -p "$RUN"
args=()
if [ -n "${AGREE_WITH:-}" ]; then
  rows=$(python3 -c "import json,sys; print(','.join(json.loads(l)['problem_id'] for l in open(sys.argv[1])))" \
    "$AGREE_WITH/results.jsonl")
  args=(--rows "$rows" --agree-with "$AGREE_WITH/results.jsonl" --costs-from "$AGREE_WITH/results.jsonl")
fi
before=$( [ -f "$RUN/results.jsonl" ] && grep -c . "$RUN/results.jsonl" || echo 0)
# MIRROR=DIR copies RUN's files to DIR/<RUN's name> every MIRROR_EVERY_S seconds (20) and at the end, so a
# call stopped from outside (a machine's own time limit) still leaves its finished rows in DIR: results.jsonl
# is replaced whole after every evaluation, so each copy is a complete file.
mirror() { mkdir -p "$MIRROR/$(basename "$RUN")" && cp -p "$RUN"/* "$MIRROR/$(basename "$RUN")/" 2>/dev/null; }
mirror_pid=
if [ -n "${MIRROR:-}" ]; then
  ( while sleep "${MIRROR_EVERY_S:-20}"; do mirror; done ) &
  mirror_pid=$!
fi
s=$(date +%s.%N)
timeout "${LIMIT_S:-540}" python3 benchmarks/release_eval.py --release "$RELEASE" --out "$RUN" "${args[@]}" ${EXTRA:-} \
  >> "$RUN/run.log" 2>&1
rc=$?
e=$(date +%s.%N)
pkill -9 -f 'cudal1[.]evaluator[.]worker'  # a pattern that does not match this script's own command line
# ...and what the workers started: a build worker's ninja and compilers run on after their worker dies, and
# the next call's build of the same program would write the same folder beside them, which damaged ninja's
# deps log of L1-88 and L1-97 (docs/gpu-runs.md#2026-11-29-one-host-release). Sandboxed processes carry
# uids from 200000 up (cudal1/evaluator/process.py); nothing else on the GPU machine does.
ps -eo pid=,uid= | awk '$2 >= 200000 {print $1}' | xargs -r kill -9 2>/dev/null
after=$( [ -f "$RUN/results.jsonl" ] && grep -c . "$RUN/results.jsonl" || echo 0)
python3 -c "import json,sys; print(json.dumps({'wall_s': round($e - $s, 1), 'evaluations_before': $before, 'evaluations_after': $after, 'stopped_by_limit': $rc == 124}))" \
  >> "$RUN/calls.jsonl"
if [ -n "$mirror_pid" ]; then kill "$mirror_pid" 2>/dev/null; mirror; fi
tail -n 1 "$RUN/calls.jsonl"; tail -n 1 "$RUN/run.log"
