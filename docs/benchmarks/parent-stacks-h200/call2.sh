# new code: GPU suite, then the release sample cold and warm (stacks); the build cache stays for call3
T0=$(date +%s)
source benchmarks/gpu_setup.sh > /tmp/setup.log 2>&1
echo "setup $(( $(date +%s) - T0 )) s"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; date -u; lscpu | grep "Model name"; cat carry/commit.txt
PYTHONPYCACHEPREFIX=/tmp/pyc python3 -m compileall -q carry/old/cudal1 carry/old/benchmarks > /dev/null 2>&1
mkdir -p $OUT/suite
OUT=$OUT/suite STEPS=gpu-tests timeout 300 bash benchmarks/evaluator_gpu.sh 2>&1 | tail -n 4
echo "suite done $(( $(date +%s) - T0 )) s"
ROWS=$(python3 -c "
import json
rows=[json.loads(l) for l in open('carry/h100.jsonl')]
ids=['L%s-%s' % (r['level_id'], r['task_id']) for r in rows if r.get('custom_code')]
print(','.join(ids[::7]))")
echo "$ROWS" > /tmp/rows.txt
mkdir -p /tmp/s
rm -rf /tmp/cudal1-extensions
for run in cold warm1; do
  extra=(); [ $run != cold ] && extra=(--agree-with /tmp/s/cold/results.jsonl)
  timeout ${RUN_S:-200} python3 benchmarks/release_eval.py --release carry/h100.jsonl --devices cuda:0 --out /tmp/s/$run \
    --rows "$ROWS" --call-pace --stacks "${extra[@]}" > /tmp/s/$run.log 2>&1
  echo "$run rc=$? $(tail -n 1 /tmp/s/$run.log | cut -c1-200)"
  echo "elapsed $(( $(date +%s) - T0 )) s"
done
tar czf $OUT/s2.tgz -C /tmp s
