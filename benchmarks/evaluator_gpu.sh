#!/usr/bin/env bash
# The evaluator's GPU figures beside a release pair (benchmarks/release_run.sh), on the GPU machine from the
# repository root, after `source benchmarks/gpu_setup.sh` (torch and the cudal1 core; trl and datasets wheels
# for the learning step). Each step writes under $OUT; benchmarks/release_bench.py turns them into results.
#
#   STEPS="overhead evalone gpu-tests learning" [RELEASE=carry/h100.jsonl] [COMMIT=abc1234] bash benchmarks/evaluator_gpu.sh
#
# overhead   benchmarks/timing_overhead.py on ten release references -> $OUT/overhead.json
# evalone    two `cudal1 evaluate-one` calls of tests/fixtures/evalone (an elementwise program), wall clock
#            -> $OUT/evaluate_one.json (the second call: the first also pays the build of the draw kernels)
# gpu-tests  the GPU suite (pytest -m gpu tests/gpu) -> $OUT/gpu-tests.log and $OUT/gpu-suite/result.json
#            (passed, failed, seconds; copy the folder to results/gpu-suite)
# learning   one RL epoch of benchmarks/learning_gpu.py -> $OUT/learning.json (its last output line)
# DRY_RUN=1 prints each step's commands and runs nothing.
set -uo pipefail
OUT=${OUT:-/tmp/cudal1-gpu}
RELEASE=${RELEASE:-carry/h100.jsonl}
EVALONE=tests/fixtures/evalone
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}. PYTHONUNBUFFERED=1
dry() { [ "${DRY_RUN:-0}" = 1 ]; }
stamp() { echo "[$(date +%T)] $*"; }
dry || mkdir -p "$OUT"

evalone() {  # call number: one timed `cudal1 evaluate-one`, its wall and result -> $OUT/evaluate_one_<k>.json
  local s e
  s=$(date +%s.%N)
  python3 -m cudal1.cli evaluate-one --reference $EVALONE/ref.py --candidate $EVALONE/cand.py --device cuda:0 --json \
    > "$OUT/evalone-$1.txt" 2>&1
  e=$(date +%s.%N)
  python3 -c "import json,sys; print(json.dumps({'wall_s': round(float(sys.argv[2]) - float(sys.argv[1]), 2), 'call': int(sys.argv[3]), 'result': json.loads(open(sys.argv[4]).read().strip().splitlines()[-1])}))" \
    "$s" "$e" "$1" "$OUT/evalone-$1.txt" > "$OUT/evaluate_one_$1.json" || tail -n 5 "$OUT/evalone-$1.txt"
}

gpu_suite_result() {  # the suite's summary line -> $OUT/gpu-suite/result.json
  python3 - "$OUT/gpu-tests.log" "$OUT/gpu-suite" "${COMMIT:-unknown}" <<'PY'
import os, subprocess, sys
from pathlib import Path
from cudal1.measured import pytest_summary, write_result
log, folder, commit = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
counts = pytest_summary(log.read_text())
gpu = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                     text=True).stdout.splitlines()[:1] or ["GPU"]
print(write_result(folder, title="The GPU test suite (pytest -m gpu tests/gpu)", commit=commit,
                   command="STEPS=gpu-tests bash benchmarks/evaluator_gpu.sh (python3 -m pytest -q -rA -m gpu tests/gpu)",
                   hardware=f"1x {gpu[0].strip()} ({os.cpu_count()} cores)",
                   figures={k: counts[k] for k in ("passed", "failed", "seconds")}))
PY
}

for step in ${STEPS:-overhead evalone gpu-tests}; do
  stamp "$step"
  case $step in
    overhead)
      cmd=(python3 benchmarks/timing_overhead.py --release "$RELEASE" --device cuda:0 --json "$OUT/overhead.json"
           --rows "${OVERHEAD_ROWS:-L1-1,L1-19,L1-23,L1-40,L1-64,L1-92,L2-12,L2-46,L2-76,L3-1}")
      if dry; then echo "${cmd[*]}"; else "${cmd[@]}" 2>&1 | tail -n 3; fi ;;
    evalone)
      if dry; then echo "python3 -m cudal1.cli evaluate-one --reference $EVALONE/ref.py --candidate $EVALONE/cand.py" \
        "--device cuda:0 --json  # twice, timed -> $OUT/evaluate_one.json"
      else evalone 1 && evalone 2 && cp "$OUT/evaluate_one_2.json" "$OUT/evaluate_one.json" && cat "$OUT/evaluate_one.json"
      fi ;;
    gpu-tests)
      if dry; then echo "python3 -m pytest -q -rA -m gpu -p no:cacheprovider tests/gpu > $OUT/gpu-tests.log  # -> $OUT/gpu-suite"
      else
        python3 -m pytest -q -rA -m gpu -p no:cacheprovider tests/gpu > "$OUT/gpu-tests.log" 2>&1
        tail -n 3 "$OUT/gpu-tests.log"
        gpu_suite_result
      fi ;;
    learning)
      cmd=(python3 benchmarks/learning_gpu.py --device cuda:0 --problems 6 --sft-epochs 20 --out /tmp/lgpu)
      if dry; then echo "${cmd[*]} > $OUT/learning.log"
      else
        rm -rf /tmp/lgpu
        "${cmd[@]}" > "$OUT/learning.log" 2>&1
        tail -n 1 "$OUT/learning.log" > "$OUT/learning.json"; tail -c 600 "$OUT/learning.json"
      fi ;;
    *) echo "evaluator_gpu.sh: unknown step '$step' (overhead, evalone, gpu-tests, learning)" >&2; exit 2 ;;
  esac
done
stamp done
