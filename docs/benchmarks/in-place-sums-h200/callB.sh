# The next call on the same machine, from the repository root (carry/old: the code before, e7df7ff): overhead and
# `evaluate-one`, then a sample of release rows (the large-tensor rows of the batch profile and every seventh row
# with a program) cold on this tree, then warm in turn on the code before and this tree while time is left.
T0=$(date +%s)
source benchmarks/gpu_setup.sh > /tmp/setup.log 2>&1
date -u; cat carry/commit.txt
[ "${OV:-1}" = 1 ] && OUT=$OUT/ov STEPS="overhead evalone" RELEASE=carry/h100.jsonl timeout 150 bash benchmarks/evaluator_gpu.sh 2>&1 | tail -n 3
ROWS=$(python3 -c "
import json
rows=[json.loads(l) for l in open('carry/h100.jsonl')]
ids=['L%s-%s' % (r['level_id'], r['task_id']) for r in rows if r.get('custom_code')]
big='L1-5,L1-40,L1-36,L1-46,L1-43,L1-87,L1-63,L1-65,L1-83,L1-19,L1-23,L2-46,L3-1,L2-31'.split(',')
print(','.join(sorted(set(ids[::7]) | set(big))))")
echo "$ROWS" | tr ',' '\n' | wc -l
mkdir -p /tmp/s
n=0
for arm in cold old new old new; do
  [ $n -gt 0 ] && [ $(( ${CALL_S:-580} - ($(date +%s) - T0) )) -lt ${ARM_S:-110} ] && break
  n=$((n+1)); name=r$n-$arm
  if [ $arm = old ]; then dir=carry/old; rel=../h100.jsonl; else dir=.; rel=carry/h100.jsonl; fi
  extra=(); [ $arm != cold ] && extra=(--agree-with /tmp/s/r1-cold/results.jsonl)
  ( cd $dir && PYTHONPATH=.:/tmp/site timeout $(( ${CALL_S:-580} - ($(date +%s) - T0) - 15 )) python3 benchmarks/release_eval.py \
      --release $rel --devices cuda:0 --out /tmp/s/$name --rows "$ROWS" --call-pace "${extra[@]}" > /tmp/s/$name.log 2>&1 )
  echo "$name rc=$? $(tail -n 1 /tmp/s/$name.log | cut -c1-200); elapsed $(( $(date +%s) - T0 )) s"
  tar czf $OUT/s.tgz -C /tmp s  # after every arm: what ran comes back if the call is cut
done
