# One call of: [one RL epoch (learning_gpu.py); the release's builds alone into the emptied build cache], then
# the whole release on both GPUs, then on one, each resumed from /tmp/rel; CALL_S seconds in all for this call.
T0=$(date +%s)
WHEELS=carry/wheels source benchmarks/gpu_setup.sh > /tmp/setup.log 2>&1
left() { echo $(( ${CALL_S:-585} - ($(date +%s) - T0) )); }
n() { if [ -f "$1/results.jsonl" ]; then grep -c . "$1/results.jsonl"; else echo 0; fi; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; date -u; lscpu | grep "Model name"; cat carry/commit.txt
tail -n 2 /tmp/setup.log
C=carry/costs2.jsonl
if [ "${FIRST:-0}" != 1 ] && [ ! -d /tmp/rel/two ]; then echo "LOST the machine: two-GPU run not found"; exit 3; fi
if [ "${FIRST:-0}" = 1 ]; then
  mkdir -p $OUT/i; lscpu > $OUT/i/lscpu.txt
  python3 -c "import trl, datasets; print('trl', trl.__version__, 'datasets', datasets.__version__)" 2>&1 | tail -n 1
  OUT=$OUT/i/l STEPS=learning timeout 170 bash benchmarks/evaluator_gpu.sh 2>&1 | tail -n 2 | cut -c1-600
  date -u
  rm -rf /tmp/cudal1-extensions
  timeout 280 python3 benchmarks/build_floor.py --release carry/h100.jsonl --device cuda:0 --workers 20 --into-cache \
    --json $OUT/i/fill.json > $OUT/i/fill.log 2>&1; echo "fill rc $?"; tail -n 2 $OUT/i/fill.log | cut -c1-400
  pkill -9 -f 'cudal1[.]evaluator[.]worker'; ps -eo pid=,uid= | awk '$2 >= 200000 {print $1}' | xargs -r kill -9 2>/dev/null
  tar czf $OUT/i.tgz -C $OUT i && rm -rf $OUT/i
  date -u
fi
if [ "$(n /tmp/rel/two)" -lt 210 ] && [ "$(left)" -gt 30 ]; then
  RUN=/tmp/rel/two COLD=0 MIRROR=$OUT EXTRA="--call-pace --devices cuda:0,cuda:1 --costs-from $C" LIMIT_S=$(left) \
    bash benchmarks/release_resume.sh 2>&1 | tail -n 3 | cut -c1-400
  date -u
fi
if [ "$(n /tmp/rel/two)" -ge 210 ] && [ "$(n /tmp/rel/one)" -lt 210 ] && [ "$(left)" -gt 30 ]; then
  RUN=/tmp/rel/one COLD=0 MIRROR=$OUT EXTRA="--call-pace --devices cuda:0 --costs-from $C" LIMIT_S=$(left) \
    bash benchmarks/release_resume.sh 2>&1 | tail -n 3 | cut -c1-400
  date -u
fi
if [ "${TWO2:-0}" = 1 ] && [ "$(n /tmp/rel/one)" -ge 210 ] && [ "$(n /tmp/rel/two2)" -lt 210 ] && [ "$(left)" -gt 30 ]; then
  RUN=/tmp/rel/two2 COLD=0 MIRROR=$OUT EXTRA="--call-pace --devices cuda:0,cuda:1 --costs-from $C" LIMIT_S=$(left) \
    bash benchmarks/release_resume.sh 2>&1 | tail -n 3 | cut -c1-400
  date -u
fi
if [ "${LEARN:-0}" = 1 ] && [ "$(left)" -gt 60 ]; then
  mkdir -p $OUT/l; CUDA_VISIBLE_DEVICES=0 OUT=$OUT/l STEPS=learning timeout $(( $(left) - 5 )) bash benchmarks/evaluator_gpu.sh 2>&1 | tail -n 2 | cut -c1-900
  date -u
fi
if [ "$(n /tmp/rel/one)" -ge 210 ]; then
  python3 benchmarks/agreement_split.py /tmp/rel/one /tmp/rel/two 2>&1 | grep "rows ok in both\|reasons\|spreads"
fi
echo "two rows $(n /tmp/rel/two), one rows $(n /tmp/rel/one), two2 rows $(n /tmp/rel/two2)"; date -u
