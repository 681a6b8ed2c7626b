T0=$(date +%s)
source benchmarks/gpu_setup.sh > /tmp/setup.log 2>&1
echo "setup $(( $(date +%s) - T0 )) s"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; date -u; lscpu | grep "Model name"; cat carry/commit.txt
ROWS=$(python3 -c "
import json
rows=[json.loads(l) for l in open('carry/h100.jsonl')]
ids=['L%s-%s' % (r['level_id'], r['task_id']) for r in rows if r.get('custom_code')]
print(','.join(ids[::7]))")
echo "$ROWS" | tr ',' '\n' | wc -l
mkdir -p /tmp/s $OUT/s
rm -rf /tmp/cudal1-extensions
for run in cold warm; do
  extra=(); [ $run = warm ] && extra=(--agree-with /tmp/s/cold/results.jsonl)
  timeout ${RUN_S:-240} python3 benchmarks/release_eval.py --release carry/h100.jsonl --devices cuda:0 --out /tmp/s/$run \
    --rows "$ROWS" --call-pace --stacks "${extra[@]}" > /tmp/s/$run.log 2>&1
  echo "$run rc=$? $(tail -n 1 /tmp/s/$run.log | cut -c1-300)"
  echo "elapsed $(( $(date +%s) - T0 )) s"
done
tar czf $OUT/s.tgz -C /tmp s
