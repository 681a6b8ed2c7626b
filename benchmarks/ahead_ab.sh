#!/usr/bin/env bash
# How many candidates a device loads ahead of the one it times (batch.AHEAD, release_eval.py --ahead),
# A/B on a sample of the release (every EVERY-th row with a program), each arm on the same warm build
# cache. Timing waits for a batch of loads ahead, so a device waits once a batch: on the whole release
# the one-GPU warm run waited 128 s of its 481.6 s of rows for loads with three ahead
# (docs/benchmarks/two-gpu-h100/w-warm-one-gpu). From the repository root on the GPU machine, after
# `source benchmarks/gpu_setup.sh`:
#
#   RUN=/tmp/ahead ORDER="8 3" bash benchmarks/ahead_ab.sh     # first call: the cold run, then two arms
#   RUN=/tmp/ahead ORDER="3 8" bash benchmarks/ahead_ab.sh     # next call of the same machine: two more
#
# Any other A/B on the same sample names its arms in ORDER and gives each its release_eval.py arguments in
# ARM_<name> (an ORDER word without one is a number of loads ahead), e.g. a program that tunes itself
# making its first call alone (EvalConfig.tune_alone) against not:
#
#   RUN=/tmp/tune ORDER="tune base" ARM_tune=--tune-alone ARM_base=--no-tune-alone bash benchmarks/ahead_ab.sh
#   RUN=/tmp/tune ORDER="base tune" ARM_tune=--tune-alone ARM_base=--no-tune-alone bash benchmarks/ahead_ab.sh
#
# ROWS=L1-6,L1-17,... takes those rows instead of every EVERY-th (4) row with a program.
# The first call runs the sample cold into RUN/cold (build cache emptied; it fills the cache and gives the
# warm arms their rows, costs and foretold re-checks); every arm then runs warm into RUN/a<ahead>-<n>.
# Each arm prints its wall, its waits for loads and its agreement with the cold run; then, here:
#   python3 benchmarks/pool_phases.py RUN/a8-0/results.jsonl
set -uo pipefail
: "${RUN:?RUN=folder of the A/B}"
RELEASE=${RELEASE:-carry/h100.jsonl}
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}.
if [ ! -f "$RUN/cold/results.jsonl" ]; then
  # ROWS (problem ids, comma-separated) instead of every EVERY-th row
  rows=${ROWS:-}
  [ -n "$rows" ] || rows=$(python3 -c "import sys
from cudal1.problems import load_cudal1_release
ids = [r.problem.problem_id for r in load_cudal1_release(sys.argv[1]) if r.candidate_source]
print(','.join(ids[::int(sys.argv[2])]))" "$RELEASE" "${EVERY:-4}")
  RUN=$RUN/cold RELEASE=$RELEASE EXTRA="--rows $rows" LIMIT_S=${COLD_LIMIT_S:-300} bash benchmarks/release_resume.sh
fi
for a in ${ORDER:-8 3}; do
  n=$(find "$RUN" -maxdepth 1 -name "a$a-*" | wc -l)
  arm=$RUN/a$a-$n
  spec=ARM_$a
  extra=${!spec---ahead $a}
  # AGREE_WITH before RUN: an assignment on a command line sees the ones to its left
  AGREE_WITH=$RUN/cold RUN=$arm RELEASE=$RELEASE EXTRA="$extra" LIMIT_S=${LIMIT_S:-300} \
    bash benchmarks/release_resume.sh >/dev/null
  python3 - "$arm" <<'PY'
import json, sys
from pathlib import Path
arm = Path(sys.argv[1])
s = json.loads((arm / "summary.json").read_text())
calls = [json.loads(line) for line in (arm / "calls.jsonl").read_text().splitlines()]
print(arm.name, "ahead", s["ahead"], "tune_alone", s["config"].get("tune_alone"), "call wall", calls[-1]["wall_s"], "run wall", s["wall_s"],
      "evaluations", s["evaluations"], "statuses", s["statuses"], "split", s["time_split_s"],
      "agreement with cold", s.get("agreement"))
PY
done
