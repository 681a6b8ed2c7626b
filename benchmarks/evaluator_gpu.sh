#!/usr/bin/env bash
# The evaluator's GPU figures (docs/benchmarks/release-h100.json), run on the GPU machine from the
# repository root with torch and the cudal1 core (trl/datasets wheels for the RL epoch). Each step
# writes under $OUT (packed into $OUT/results.tgz at the end); benchmarks/release_bench.py turns them
# into the JSON afterwards.
#
#   STEPS="overhead evalone gpu-tests sample learning" [RELEASE=carry/h100.jsonl] [LIMIT=36] \
#       bash benchmarks/evaluator_gpu.sh
#   STEPS="release" RELEASE=carry/h100.jsonl [DEVICES=cuda:0] [RUN_TIMEOUT=s] bash benchmarks/evaluator_gpu.sh
#
# overhead   benchmarks/timing_overhead.py on a few release references -> $OUT/overhead.json
# evalone    one `cudal1 evaluate-one` of an elementwise program, wall clock -> $OUT/evaluate_one.json
# gpu-tests  the GPU adversarial suite (tests/gpu) -> $OUT/gpu-tests.log
# gpu-tests-eager  the same suite with EvalConfig.graph_inputs off -> $OUT/gpu-tests-eager.log
# gpu-tests-fast-core  the same suite with EvalConfig.fast_core 3 (every evaluation the suite makes: tests/conftest.py gpu_options) -> $OUT/gpu-tests-fast-core.log
# (EXTRA="--no-graph-inputs --clock events --trial-ms 20" passes release_eval.py options to sample/cold/release)
# sample     LIMIT rows of the release, cold build cache, then again warm -> $OUT/sample-cold, sample-warm
# cold       LIMIT rows, cold build cache only -> $OUT/cold
# release    every row, cold, then again warm -> $OUT/release-cold, $OUT/release-warm
#            (each run by benchmarks/release_resume.sh; where one call cannot hold a run, call that
#            script again with the same RUN to resume it)
# learning   one RL epoch of benchmarks/learning_gpu.py -> $OUT/learning.json
# noise      where a row's figure moves (docs/benchmarks/release-h100.md, "A trial's own noise"):
#            hidden_siblings.py -> $OUT/siblings.json; interleave.py on NOISE_ROWS -> $OUT/interleave.json;
#            graph_levels.py --gap-s 1 on the same rows -> $OUT/timeline.json (about 4 minutes in all)
# quiet-ab   benchmarks/quiet_ab.py: the starter problems' references against themselves, the candidate stopped
#            for the reference's batches and not, alternating (about 90 s) -> $OUT/quiet-ab.json
# warm-ahead benchmarks/warm_ahead.py: WARM_ROWS (two; six did not finish in 290 s) of the release with their
#            baselines, the first call loaded ahead and not, alternating rounds -> $OUT/warm-ahead.json
set -uo pipefail
OUT=${OUT:-/tmp/cudal1-gpu}
RELEASE=${RELEASE:-carry/h100.jsonl}
DEVICES=${DEVICES:-cuda:0}
mkdir -p "$OUT"
export PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}. PYTHONUNBUFFERED=1
# Sandboxed workers run as fresh uids: they must be able to traverse to the interpreter and the code.
for p in $(python3 -c "import sys,os;print(os.path.realpath(sys.executable), sys.base_prefix, os.getcwd())"); do
  d=$p; while [ "$d" != / ]; do [ -d "$d" ] && chmod o+x "$d"; d=$(dirname "$d"); done
done
stamp() { echo "[$(date +%T)] $*"; }

release_pair() {  # name release_eval-args...: a cold run, then the same rows warm (benchmarks/release_resume.sh,
  local name=$1; shift  # one call each: a RUN_TIMEOUT that stops one leaves it marked partial)
  stamp "$name cold"
  RUN="$OUT/$name-cold" LIMIT_S="${RUN_TIMEOUT:-100000}" EXTRA="--devices $DEVICES ${EXTRA:-} $*" \
    bash benchmarks/release_resume.sh
  stamp "$name warm"
  RUN="$OUT/$name-warm" AGREE_WITH="$OUT/$name-cold" LIMIT_S="${RUN_TIMEOUT:-100000}" \
    EXTRA="--devices $DEVICES ${EXTRA:-}" bash benchmarks/release_resume.sh
}

for step in ${STEPS:-overhead}; do
  case $step in
    overhead)
      stamp overhead
      python3 benchmarks/timing_overhead.py --release "$RELEASE" --rows "${OVERHEAD_ROWS:-L1-1,L1-19,L1-23,L1-40,L1-64,L1-92,L2-12,L2-46,L2-76,L3-1}" \
        --device cuda:0 --repeats 20 --json "$OUT/overhead.json" 2>&1 | tail -n 12 ;;
    evalone)
      stamp evalone
      mkdir -p /tmp/evalone
      for k in 1 2; do
        s=$(date +%s.%N)
        python3 -m cudal1.cli evaluate-one --reference benchmarks/evalone/ref.py --candidate benchmarks/evalone/cand.py \
          --device cuda:0 --json > /tmp/evalone/out$k.txt 2>&1
        e=$(date +%s.%N)
        tail -n 1 /tmp/evalone/out$k.txt
        python3 -c "import json,sys; print(json.dumps({'wall_s': round($e-$s, 2), 'call': $k, 'result': json.loads(open('/tmp/evalone/out$k.txt').read().strip().splitlines()[-1])}))" > "$OUT/evaluate_one_$k.json" || true
      done
      python3 -c "import time; t=time.perf_counter(); import torch; i=time.perf_counter(); torch.zeros(1, device='cuda'); print('import torch s', round(i-t, 2), 'cuda context s', round(time.perf_counter()-i, 2))"
      # Where the wall clock goes: the parent's profile of a third call
      python3 -m cProfile -o /tmp/evalone/p.prof -m cudal1.cli evaluate-one --reference benchmarks/evalone/ref.py \
        --candidate benchmarks/evalone/cand.py --device cuda:0 --json > /dev/null 2>&1
      python3 -c "import pstats; pstats.Stats('/tmp/evalone/p.prof').sort_stats('cumulative').print_stats(60)" \
        > "$OUT/evalone-profile.txt" 2>&1
      cp "$OUT/evaluate_one_2.json" "$OUT/evaluate_one.json" 2>/dev/null; cat "$OUT"/evaluate_one_*.json ;;
    gpu-tests)
      stamp gpu-tests
      python3 -m pytest -q -rA -m gpu -p no:cacheprovider tests/gpu > "$OUT/gpu-tests.log" 2>&1; tail -n 5 "$OUT/gpu-tests.log" ;;
    gpu-tests-fast-core)
      stamp gpu-tests-fast-core
      CUDAL1_FAST_CORE=3 python3 -m pytest -q -rA -m gpu -p no:cacheprovider tests/gpu > "$OUT/gpu-tests-fast-core.log" 2>&1
      tail -n 5 "$OUT/gpu-tests-fast-core.log" ;;
    gpu-tests-eager)
      stamp gpu-tests-eager
      CUDAL1_GRAPH_INPUTS=0 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu -x > "$OUT/gpu-tests-eager.log" 2>&1
      tail -n 5 "$OUT/gpu-tests-eager.log" ;;
    sample)
      release_pair sample --limit "${LIMIT:-36}" ;;
    cold)  # LIMIT rows, cold build cache only (with CUDAL1_TIMING_TRACE=1: per-trial details in extra)
      stamp "cold ${LIMIT:-36}"
      RUN="$OUT/cold" LIMIT_S="${RUN_TIMEOUT:-100000}" \
        EXTRA="--devices $DEVICES ${EXTRA:-} ${ROWS:+--rows $ROWS} --limit ${LIMIT:-36}" bash benchmarks/release_resume.sh ;;
    release)
      release_pair release ;;
    warm-ahead)
      stamp warm-ahead
      python3 benchmarks/warm_ahead.py --device cuda:0 --release "$RELEASE" --baselines --tolerance 1e-2 \
        --rows "${WARM_ROWS:-L1-19,L2-12}" --rounds "${ROUNDS:-2}" \
        --json "$OUT/warm-ahead.json" > "$OUT/warm-ahead.log" 2>&1; tail -n 6 "$OUT/warm-ahead.log" ;;
    quiet-ab)
      stamp quiet-ab
      python3 benchmarks/quiet_ab.py --device cuda:0 --problems 8 --rounds "${QUIET_ROUNDS:-4}" --json "$OUT/quiet-ab.json" \
        > "$OUT/quiet-ab.log" 2>&1; tail -n 1 "$OUT/quiet-ab.log" ;;
    noise)
      rows=${NOISE_ROWS:-L2-41,L2-70,L2-69,L1-64,L2-85,L2-99}
      stamp "noise: siblings"
      python3 benchmarks/hidden_siblings.py --json "$OUT/siblings.json" 2>&1 | tail -n 4
      stamp "noise: interleave $rows"
      python3 benchmarks/interleave.py --release "$RELEASE" --rows "$rows" --device cuda:0 \
        --evaluations "${EVALUATIONS:-6}" --json "$OUT/interleave.json" 2>&1 | tail -n 8
      stamp "noise: timeline $rows"
      python3 benchmarks/graph_levels.py --release "$RELEASE" --rows "$rows" --device cuda:0 --rounds 60 \
        --calls 40 --gap-s 1.0 --json "$OUT/timeline.json" 2>&1 | tail -n 8 ;;
    learning)
      stamp learning
      python3 benchmarks/learning_gpu.py --device cuda:0 --problems 6 --sft-epochs 20 --out /tmp/lgpu > "$OUT/learning.log" 2>&1
      tail -n 1 "$OUT/learning.log" > "$OUT/learning.json"; tail -c 1500 "$OUT/learning.json" ;;
  esac
done
stamp done
# Everything under $OUT becomes one archive, so the results are copied back as one file.
tar czf /tmp/cudal1-gpu-results.tgz -C "$OUT" . && rm -rf "${OUT:?}"/* && mv /tmp/cudal1-gpu-results.tgz "$OUT/results.tgz"
