# One call of: [the GPU suite, overhead and evaluate-one], then the whole release cold, then warm,
# each resumed from /tmp/rel on the same machine; CALL_S seconds in all for this call.
T0=$(date +%s)
source benchmarks/gpu_setup.sh > /tmp/setup.log 2>&1
left() { echo $(( ${CALL_S:-585} - ($(date +%s) - T0) )); }
n() { if [ -f "$1/results.jsonl" ]; then grep -c . "$1/results.jsonl"; else echo 0; fi; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; date -u; lscpu | grep "Model name"; cat carry/commit.txt
if [ "${FIRST:-0}" != 1 ] && [ ! -f /tmp/rel/rcold/results.jsonl ]; then echo "LOST the machine: cold run not found"; exit 3; fi
if [ "${SUITE:-0}" = 1 ]; then
  mkdir -p $OUT/i; lscpu > $OUT/i/lscpu.txt
  OUT=$OUT/i/s STEPS=gpu-tests timeout 340 bash benchmarks/evaluator_gpu.sh 2>&1 | tail -n 6
  date -u
  OUT=$OUT/i/ov STEPS="overhead evalone" RELEASE=carry/h100.jsonl timeout 110 bash benchmarks/evaluator_gpu.sh 2>&1 | tail -n 8
  tar czf $OUT/i.tgz -C $OUT i && rm -rf $OUT/i
  date -u
fi
if [ "$(n /tmp/rel/rcold)" -lt 210 ] && [ "$(left)" -gt 30 ]; then
  RUN=/tmp/rel/rcold MIRROR=$OUT EXTRA="--call-pace" LIMIT_S=$(left) bash benchmarks/release_resume.sh 2>&1 | tail -n 3 | cut -c1-400
  date -u
fi
if [ "$(n /tmp/rel/rcold)" -ge 210 ] && [ "$(n /tmp/rel/rwarm)" -lt 210 ] && [ "$(left)" -gt 60 ]; then
  RUN=/tmp/rel/rwarm AGREE_WITH=/tmp/rel/rcold MIRROR=$OUT EXTRA="--call-pace" LIMIT_S=$(left) bash benchmarks/release_resume.sh 2>&1 | tail -n 3 | cut -c1-400
  date -u
fi
if [ "$(n /tmp/rel/rwarm)" -ge 210 ]; then
  python3 benchmarks/agreement_split.py /tmp/rel/rcold /tmp/rel/rwarm 2>&1 | grep "rows ok in both\|reasons\|spreads"
fi
echo "cold rows $(n /tmp/rel/rcold), warm rows $(n /tmp/rel/rwarm)"; date -u
