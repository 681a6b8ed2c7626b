# same machine as call2: warm sample A/B, old code (a4f5517, carry/old) against new, in the order old new new old
T0=$(date +%s)
export PYTHONUNBUFFERED=1 PYTHONPYCACHEPREFIX=/tmp/pyc
ROWS=$(cat /tmp/rows.txt) || { echo "LOST the machine"; exit 3; }
ls /tmp/cudal1-extensions > /dev/null || { echo "no build cache"; exit 3; }
date -u; cat carry/commit.txt
n=0
for arm in old new new old; do
  n=$((n+1)); name=ab$n-$arm
  if [ $arm = old ]; then dir=carry/old; rel=../h100.jsonl; else dir=.; rel=carry/h100.jsonl; fi
  ( cd $dir && PYTHONPATH=.:/tmp/site timeout 150 python3 benchmarks/release_eval.py --release $rel --devices cuda:0 \
      --out /tmp/s/$name --rows "$ROWS" --call-pace --stacks --agree-with /tmp/s/cold/results.jsonl > /tmp/s/$name.log 2>&1 )
  echo "$name rc=$? $(tail -n 1 /tmp/s/$name.log | cut -c1-160)"
  echo "elapsed $(( $(date +%s) - T0 )) s"
done
PYTHONPATH=.:/tmp/site OUT=$OUT/ov STEPS="overhead evalone" RELEASE=carry/h100.jsonl timeout 100 bash benchmarks/evaluator_gpu.sh 2>&1 | tail -n 3
tar czf $OUT/s3.tgz -C /tmp s
