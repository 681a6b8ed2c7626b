# a second host: the sample cold on the new code (fills the build cache), then warm A/B old new new old
T0=$(date +%s)
source benchmarks/gpu_setup.sh > /tmp/setup.log 2>&1
echo "setup $(( $(date +%s) - T0 )) s"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; date -u; lscpu | grep "Model name"; cat carry/commit.txt
PYTHONPYCACHEPREFIX=/tmp/pyc python3 -m compileall -q carry/old/cudal1 carry/old/benchmarks > /dev/null 2>&1
ROWS=$(python3 -c "
import json
rows=[json.loads(l) for l in open('carry/h100.jsonl')]
ids=['L%s-%s' % (r['level_id'], r['task_id']) for r in rows if r.get('custom_code')]
print(','.join(ids[::7]))")
mkdir -p /tmp/s
rm -rf /tmp/cudal1-extensions
timeout 125 python3 benchmarks/release_eval.py --release carry/h100.jsonl --devices cuda:0 --out /tmp/s/cold \
  --rows "$ROWS" --call-pace --stacks > /tmp/s/cold.log 2>&1
echo "cold rc=$? $(tail -n 1 /tmp/s/cold.log | cut -c1-120)"; echo "elapsed $(( $(date +%s) - T0 )) s"
n=0
for arm in old new new old; do
  n=$((n+1)); name=ab$n-$arm
  if [ $arm = old ]; then dir=carry/old; rel=../h100.jsonl; else dir=.; rel=carry/h100.jsonl; fi
  ( cd $dir && PYTHONPATH=.:/tmp/site timeout 75 python3 benchmarks/release_eval.py --release $rel --devices cuda:0 \
      --out /tmp/s/$name --rows "$ROWS" --call-pace --stacks --agree-with /tmp/s/cold/results.jsonl > /tmp/s/$name.log 2>&1 )
  echo "$name rc=$? $(tail -n 1 /tmp/s/$name.log | cut -c1-120)"
  echo "elapsed $(( $(date +%s) - T0 )) s"
  tar czf $OUT/s4.tgz -C /tmp s
done
