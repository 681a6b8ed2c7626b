#!/usr/bin/env bash
# One GPU against two of one two-GPU host on the same release rows, the two-GPU run first (a host that warms
# up favours the one-GPU run). From the repository root on the GPU machine (torch + this package only):
#
#   [WARM=1] [EVERY=1] [RELEASE=carry/h100.jsonl] [CALL_S=540] [COMMIT=abc1234] bash benchmarks/two_gpu.sh
#
# WARM=1 (the default): a cold run on both GPUs fills the build cache first, then both runs measure on it,
# so that only the devices are compared (a cold run's builds are CPU work a second GPU does not share);
# WARM=0: each run starts on an empty build cache. EVERY=n measures every n-th row with a program. Each run
# is benchmarks/release_run.sh's, in its own session under $WORK (default /tmp/two-gpu): a run longer than
# the call goes on, and calling this script again (same machine) waits on it; exit 3 while one still runs.
# When both are done, $OUT/two-gpu holds result.json (release_bench.py) and the runs' files: copy it to
# results/two-gpu-h200 (or a folder named for the GPU). DRY_RUN=1 prints the runs' commands.
set -uo pipefail
OUT=${OUT:-/tmp/cudal1-two-gpu}
WORK=${WORK:-/tmp/two-gpu}
RELEASE=${RELEASE:-carry/h100.jsonl}
T0=$(date +%s)
left() { echo $(( ${CALL_S:-540} - ($(date +%s) - T0) )); }
dry() { [ "${DRY_RUN:-0}" = 1 ]; }
dry || { source benchmarks/gpu_setup.sh > /tmp/two-gpu-setup.log 2>&1; mkdir -p "$OUT" "$WORK"; }
rows=""
if [ "${EVERY:-1}" != 1 ]; then
  rows=$(PYTHONPATH=. python3 -c "import sys
from cudal1.problems import load_cudal1_release
ids = [r.problem.problem_id for r in load_cudal1_release(sys.argv[1]) if r.candidate_source]
print(','.join(ids[::int(sys.argv[2])]))" "$RELEASE" "$EVERY")
fi
both=cuda:0,cuda:1
if [ "${WARM:-1}" = 1 ]; then
  runs="fill/cold/$both two/warm/$both one/warm/cuda:0"
  cache=warm; one=$WORK/one/warm; two=$WORK/two/warm
else
  runs="two/cold/$both one/cold/cuda:0"
  cache=empty; one=$WORK/one/cold; two=$WORK/two/cold
fi
for spec in $runs; do
  IFS=/ read -r name step devices <<< "$spec"
  RUN=$WORK/$name STEPS=$step FROM=$WORK/fill/cold DEVICES=$devices ROWS=$rows RELEASE=$RELEASE UNTIL_S=$(left) \
    bash benchmarks/release_run.sh || exit $?
done
dry && exit 0
gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
mkdir -p "$OUT/two-gpu"
for run in "$one" "$two"; do
  dest=$OUT/two-gpu/$(basename "$(dirname "$run")")
  mkdir -p "$dest" && cp -p "$run"/{results.jsonl,summary.json,calls.jsonl} "$dest/"
done
python3 benchmarks/release_bench.py --one-gpu "$OUT/two-gpu/one" --two-gpu "$OUT/two-gpu/two" --build-cache "$cache" \
  --out "$OUT/two-gpu" --commit "${COMMIT:-unknown}" --hardware "2x $gpus of one host ($(nproc) cores)" \
  --command "WARM=${WARM:-1} EVERY=${EVERY:-1} bash benchmarks/two_gpu.sh"
