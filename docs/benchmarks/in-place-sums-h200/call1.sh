# The first device call, from the repository root: the changed kernels' GPU tests alone (no release run when
# they fail), the harness's kernels on 64M and 4M values, then the first call of the release pair (the GPU
# suite, overhead, `evaluate-one`, the cold run started). Then: CALL_S=585 bash benchmarks/release_pair_call.sh
T0=$(date +%s)
WHEELS=carry/wheels source benchmarks/gpu_setup.sh > /tmp/setup0.log 2>&1
mkdir -p $OUT/k
python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_gpu_in_place_sums.py tests/gpu/test_gpu_draws.py \
  > $OUT/k/first-tests.log 2>&1
tail -n 12 $OUT/k/first-tests.log
if ! tail -n 1 $OUT/k/first-tests.log | grep -q " passed" || tail -n 1 $OUT/k/first-tests.log | grep -q "failed\|error"; then
  echo "STOP: the changed kernels' tests did not pass"; exit 4
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
echo "before the pair: $(( $(date +%s) - T0 )) s"
CALL_S=$(( ${CALL_S:-585} - ($(date +%s) - T0) )) FIRST=1 bash benchmarks/release_pair_call.sh
