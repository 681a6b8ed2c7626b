# One device call of the whole release's cold-then-warm pair on one GPU, from the repository root
# (carry/h100.jsonl a copy of ../shared/cuda-l1/h100.jsonl, carry/commit.txt the tree's commit):
# [the GPU suite, then (OV=1, the default) the overhead and `evaluate-one`], then the whole release cold, then
# warm, each as ONE run that outlives the device call it started in (setsid: a process in its own session runs
# on until the machine goes back), so neither run is cut at a call's limit; each later call waits for it.
# CALL_S seconds in all for a call. Results come back as $OUT/i.tgz (first call), rcold.tgz and rwarm.tgz.
#
#   CALL_S=580 FIRST=1 bash benchmarks/release_pair_call.sh   # suite, overhead, evaluate-one; starts the cold run
#   CALL_S=585 bash benchmarks/release_pair_call.sh           # again, until both runs are done
#   (SUITE=0 on the first call and SUITE_AFTER=1 on the last: the GPU suite once both runs are done)
T0=$(date +%s)
source benchmarks/gpu_setup.sh > /tmp/setup.log 2>&1
left() { echo $(( ${CALL_S:-575} - ($(date +%s) - T0) )); }
n() { if [ -f "$1/results.jsonl" ]; then grep -c . "$1/results.jsonl"; else echo 0; fi; }
done_() { [ -s "$1/calls.jsonl" ]; }
# Each run in its own session through release_outlive.sh, bounded by LIMIT_S=1500 (the run's, not a call's);
# a call waits for it until 15 s before its own end
detach() { RUN=$1 LIMIT_S=1500 env "${@:2}" bash benchmarks/release_outlive.sh start; }
wait_for() { RUN=$1 UNTIL_S=$(( $(left) - 15 )) bash benchmarks/release_outlive.sh wait > /dev/null; }
keep() { for r in rcold rwarm; do [ -d /tmp/rel/$r ] && tar czf $OUT/$r.tgz -C /tmp/rel $r $r.out 2>/dev/null; done
  echo "cold rows $(n /tmp/rel/rcold) $(done_ /tmp/rel/rcold && echo done), warm rows $(n /tmp/rel/rwarm) $(done_ /tmp/rel/rwarm && echo done); $(date -u +%T)"; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; date -u; lscpu | grep "Model name"; cat carry/commit.txt
if [ "${FIRST:-0}" = 1 ]; then
  mkdir -p $OUT/i; lscpu > $OUT/i/lscpu.txt
  [ "${SUITE:-1}" = 1 ] && OUT=$OUT/i/s STEPS=gpu-tests timeout 340 bash benchmarks/evaluator_gpu.sh 2>&1 | tail -n 6
  date -u
  [ "${OV:-1}" = 1 ] && OUT=$OUT/i/ov STEPS="overhead evalone" RELEASE=carry/h100.jsonl timeout 150 bash benchmarks/evaluator_gpu.sh 2>&1 | tail -n 4
  tar czf $OUT/i.tgz -C $OUT i && rm -rf $OUT/i
  date -u
  detach /tmp/rel/rcold EXTRA=--call-pace
elif [ ! -d /tmp/rel/rcold ]; then echo "LOST the machine: cold run not found"; exit 3; fi
wait_for /tmp/rel/rcold
if done_ /tmp/rel/rcold && [ ! -d /tmp/rel/rwarm ]; then
  tail -n 1 /tmp/rel/rcold/calls.jsonl
  detach /tmp/rel/rwarm AGREE_WITH=/tmp/rel/rcold EXTRA=--call-pace
fi
[ -d /tmp/rel/rwarm ] && wait_for /tmp/rel/rwarm
if done_ /tmp/rel/rwarm; then
  tail -n 1 /tmp/rel/rwarm/calls.jsonl
  python3 benchmarks/agreement_split.py /tmp/rel/rcold /tmp/rel/rwarm 2>&1 | grep "rows ok in both\|reasons\|spreads"
fi
keep
# SUITE_AFTER=1: the GPU suite in what is left of the call; its results.tgz is dropped (it did not come
# back from the device before; the suite's summary is in the output)
if [ "${SUITE_AFTER:-0}" = 1 ] && done_ /tmp/rel/rwarm && [ "$(left)" -gt 200 ]; then
  OUT=$OUT/s STEPS=gpu-tests timeout $(( $(left) - 10 )) bash benchmarks/evaluator_gpu.sh 2>&1 | tail -n 6
  rm -f $OUT/s/results.tgz
fi
