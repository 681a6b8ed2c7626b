#!/usr/bin/env bash
# The release re-measurement as run on the GPU machine (torch + the cudal1 core only), from the repository
# root. Cold run (empty build cache), then a second run on the warm cache, which is also the two-run
# agreement check. Results and logs under $OUT (default /tmp/cudal1-release).
#
#   RELEASE=carry/h100.jsonl DEVICES=cuda:0 [ROWS=L1-1,L2-5 | LIMIT=40] [RUNS=2] [TRIALS=5] \
#       [RUN_TIMEOUT=seconds] [COLD=0] [AGREE_WITH=earlier/results.jsonl] [COSTS=earlier/results.jsonl] \
#       [NAME=run] [EXTRA="--flag ..."] \
#       bash benchmarks/release_device.sh
# COLD=0 keeps the build cache of an earlier invocation (e.g. the same rows again on two GPUs).
# A run cut off by RUN_TIMEOUT keeps what it finished (results.jsonl is written after every row); the
# later runs then measure exactly the rows the first one finished, so cold and warm compare like for like.
set -euo pipefail
OUT=${OUT:-/tmp/cudal1-release}
RELEASE=${RELEASE:-carry/h100.jsonl}
DEVICES=${DEVICES:-cuda:0}
RUNS=${RUNS:-2}
TRIALS=${TRIALS:-5}
mkdir -p "$OUT"
# Sandboxed workers run as fresh uids: they must be able to traverse to the interpreter and the code.
for p in $(python3 -c "import sys,os;print(os.path.realpath(sys.executable), sys.base_prefix, os.getcwd())"); do
  d=$p; while [ "$d" != / ]; do [ -d "$d" ] && chmod o+x "$d"; d=$(dirname "$d"); done
done
export PYTHONPATH=.
[ "${COLD:-1}" = 1 ] && rm -rf /tmp/cudal1-extensions  # cold: nothing built yet
NAME=${NAME:-run}
extra=()
[ -n "${ROWS:-}" ] && extra+=(--rows "$ROWS")
[ -n "${LIMIT:-}" ] && extra+=(--limit "$LIMIT")
[ -n "${COSTS:-}" ] && extra+=(--costs-from "$COSTS")  # an earlier run's results.jsonl: largest rows first
read -r -a flags <<< "${EXTRA:-}"  # more options of release_eval.py, for every run
previous=()
[ -n "${AGREE_WITH:-}" ] && previous=(--agree-with "$AGREE_WITH")
for run in $(seq 1 "$RUNS"); do
  if [ -e "$OUT/$NAME$run" ]; then  # release_eval.py would resume it, and its summary time that alone
    echo "release_device.sh: $OUT/$NAME$run exists; give the run another NAME or OUT (release_resume.sh resumes runs)" >&2
    exit 2
  fi
  timeout "${RUN_TIMEOUT:-100000}" python3 benchmarks/release_eval.py --release "$RELEASE" --devices "$DEVICES" --trials "$TRIALS" \
      --out "$OUT/$NAME$run" "${extra[@]}" "${flags[@]}" "${previous[@]}" > "$OUT/$NAME$run.log" 2>&1 || true
  pkill -9 -f cudal1.evaluator.worker || true  # workers of a run cut off by the timeout (own sessions)
  tail -n 1 "$OUT/$NAME$run.log"
  previous=(--agree-with "$OUT/$NAME$run/results.jsonl")
  if [ "$run" = 1 ]; then
    rows=$(python3 -c "import json,sys; print(','.join(json.loads(l)['problem_id'] for l in open(sys.argv[1])))" \
      "$OUT/${NAME}1/results.jsonl")
    extra=(--rows "$rows")
  fi
done
