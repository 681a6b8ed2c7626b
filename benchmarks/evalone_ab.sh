#!/usr/bin/env bash
# `cudal1 evaluate-one` of the elementwise program of benchmarks/evalone/ (as evaluator_gpu.sh's evalone), wall clock,
# alternating between code trees on one machine, so that a change to the start is compared on one host.
# After `source benchmarks/gpu_setup.sh`, from the repository root:
#
#   TREES="carry/before ." [ROUNDS=3] OUT=dir bash benchmarks/evalone_ab.sh     # -> $OUT/evalone-ab.jsonl
#
# (carry/before: an older commit's cudal1/, e.g. `git archive COMMIT cudal1 | tar -x -C carry/before`.)
# On a CPU machine, with a program small enough that the start is what is compared:
#   TREES="carry/before ." DEVICE=cpu PROGRAM=benchmarks/evalone/small EXTRA="--trials 3 --correctness-trials 2" \
#     OUT=dir bash benchmarks/evalone_ab.sh
set -uo pipefail
OUT=${OUT:-/tmp/cudal1-gpu}
mkdir -p "$OUT" /tmp/evalone
for tree in ${TREES:-.}; do
  python3 -m compileall -q "$tree/cudal1" >/dev/null 2>&1  # into the bytecode prefix, as gpu_setup.sh does
  chmod -R o+rX "$tree/cudal1"
done
for round in $(seq "${ROUNDS:-3}"); do
  for tree in ${TREES:-.}; do
    s=$(date +%s.%N)
    # shellcheck disable=SC2086  # EXTRA: several options
    PYTHONPATH="$tree:/tmp/site" python3 -P -m cudal1.cli evaluate-one --reference "${PROGRAM:-benchmarks/evalone}/ref.py" \
      --candidate "${PROGRAM:-benchmarks/evalone}/cand.py" --device "${DEVICE:-cuda:0}" ${EXTRA:-} --json > /tmp/evalone/ab.txt 2>&1
    e=$(date +%s.%N)
    python3 -c "import json,sys; r=json.loads(open('/tmp/evalone/ab.txt').read().strip().splitlines()[-1]); print(json.dumps({'tree': sys.argv[1], 'round': int(sys.argv[2]), 'wall_s': round($e-$s, 2), 'status': r['status'], 'speedup': r['speedup'], 'eval_s': r.get('eval_s')}))" \
      "$tree" "$round" | tee -a "$OUT/evalone-ab.jsonl" || tail -n 5 /tmp/evalone/ab.txt
  done
done
