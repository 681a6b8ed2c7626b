# One device call, from the repository root (carry/old: `git archive e7df7ff cudal1 benchmarks`, the code before):
# the changed kernels' GPU tests alone (nothing else when they fail), the harness's kernels on 64M and 4M values,
# the whole GPU suite, overhead and `evaluate-one` (OV=1), then each timed batch's device time per kernel on large-tensor release rows, the code
# before and this tree in turn.
T0=$(date +%s)
WHEELS=carry/wheels source benchmarks/gpu_setup.sh > /tmp/setup0.log 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; date -u; cat carry/commit.txt
mkdir -p $OUT/k
python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_gpu_in_place_sums.py tests/gpu/test_gpu_draws.py \
  > $OUT/k/first-tests.log 2>&1
tail -n 3 $OUT/k/first-tests.log
if ! tail -n 1 $OUT/k/first-tests.log | grep -q " passed" || tail -n 1 $OUT/k/first-tests.log | grep -q "failed\|error"; then
  grep -n "^E\|FAILED" $OUT/k/first-tests.log | head -30; echo "STOP: the changed kernels' tests did not pass"; exit 4
fi
for n in 67108864 4194304; do
  python3 benchmarks/harness_kernels.py --device cuda:0 --numel $n --json $OUT/k/kernels-$n.json > /dev/null
done
python3 - <<'PY'
import json, os
for n in (67108864, 4194304):
    d = json.load(open(f"{os.environ['OUT']}/k/kernels-{n}.json"))
    print(n, {k: v for k, v in d.items() if k.endswith("_ms")}, {k: v["ms"] for k, v in d["sums"].items()})
PY
date -u
OUT=$OUT/s STEPS=gpu-tests timeout ${SUITE_S:-330} bash benchmarks/evaluator_gpu.sh 2>&1 | tail -n 4
date -u
[ "${OV:-1}" = 1 ] && OUT=$OUT/ov STEPS="overhead evalone" RELEASE=carry/h100.jsonl timeout 130 bash benchmarks/evaluator_gpu.sh 2>&1 | tail -n 3
date -u
R=L1-5,L1-40,L1-36,L1-46,L1-43,L1-87,L1-63,L1-65,L1-83,L1-19,L1-23,L2-46,L3-1,L2-31
for arm in old new old new; do
  [ $(( ${CALL_S:-580} - ($(date +%s) - T0) )) -lt 110 ] && break  # a profile takes up to 100 s
  script=benchmarks/batch_profile.py; [ $arm = old ] && script=carry/old/benchmarks/batch_profile.py
  timeout 100 python3 $script --release carry/h100.jsonl --rows $R --device cuda:0 --repeats 8 \
    --json $OUT/k/profile-$arm-$(date +%s).json > /dev/null 2>$OUT/k/profile-$arm.err || echo "profile $arm: rc $?"
  date -u
done
