#!/usr/bin/env bash
# One GPU against two on one two-GPU host, on the same release rows, each run cold (build cache emptied) or,
# with WARM=1, both on a build cache filled by a cold run on both GPUs first; in one call, the two-GPU run
# before the one-GPU run, so any warm-up of the host favours the one-GPU run. From the repository root on
# the GPU machine (torch + this package only):
#
#   [EVERY=4] [WARM=1] [RELEASE=carry/h100.jsonl] [RUN_TIMEOUT=300] [EXTRA="--builds-beside-timing"] bash benchmarks/two_gpu.sh
#
# Writes $OUT/two1 and $OUT/one1 (release_eval.py's folders) and prints each run's phases, their
# agreement and the ratio of their rates; then, here:
#   python benchmarks/release_bench.py --update --one-gpu RUN/one1 --two-gpu RUN/two1 [--build-cache warm] \
#       --command "..." --json docs/benchmarks/release-h100.json
set -uo pipefail
OUT=${OUT:-/tmp/cudal1-two-gpu}
RELEASE=${RELEASE:-carry/h100.jsonl}
mkdir -p "$OUT"
source benchmarks/gpu_setup.sh >/dev/null 2>&1
ROWS=$(python3 -c "import sys
from cudal1.problems import load_cudal1_release
ids = [r.problem.problem_id for r in load_cudal1_release(sys.argv[1]) if r.candidate_source]
print(','.join(ids[::int(sys.argv[2])]))" "$RELEASE" "${EVERY:-4}")
# name/devices/cold. WARM=1: a cold run on both GPUs fills the build cache (ctwo1), then two1 and one1 run on
# it, so only the devices are compared (a cold run's builds are CPU work a second GPU does not share).
specs="two/cuda:0,cuda:1/1 one/cuda:0/1"
[ "${WARM:-0}" = 1 ] && specs="ctwo/cuda:0,cuda:1/1 two/cuda:0,cuda:1/0 one/cuda:0/0"
for spec in $specs; do
  IFS=/ read -r name devices cold <<< "$spec"
  # the warm runs hand out rows largest first by what the cold run found they cost (schedule.largest_first)
  costs=""; [ "$name" != ctwo ] && [ -f "$OUT/ctwo1/results.jsonl" ] && costs=$OUT/ctwo1/results.jsonl
  OUT=$OUT RELEASE=$RELEASE DEVICES=$devices ROWS=$ROWS RUNS=1 NAME=$name COLD=$cold COSTS=$costs \
    RUN_TIMEOUT=${RUN_TIMEOUT:-300} EXTRA="${EXTRA:-}" bash benchmarks/release_device.sh
  python3 benchmarks/pool_phases.py "$OUT/${name}1/results.jsonl" | sed -n 1,2p
done
python3 benchmarks/pool_phases.py "$OUT/two1/results.jsonl" --paired "$OUT/one1/results.jsonl" | tail -n 1
python3 - "$OUT" <<'PY'
import json, sys
from pathlib import Path
sys.path.insert(0, "benchmarks")
from release_bench import rate, run_summary  # a run cut off by RUN_TIMEOUT: its log's last progress line
two, one = Path(sys.argv[1]) / "two1", Path(sys.argv[1]) / "one1"
print(json.dumps({"two_gpu_wall_s": run_summary(two)["wall_s"], "one_gpu_wall_s": run_summary(one)["wall_s"],
                  "two_gpu_speedup": round(rate(two) / rate(one), 3)}))
PY
