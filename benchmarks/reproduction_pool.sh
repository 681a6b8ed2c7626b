#!/usr/bin/env bash
# One pool of the reproduction (reproduction/dvc.yaml) on a GPU machine that has torch but not DVC: the
# command of that pool's measuring stage, run by hand, from the repository root, with the release file there
# (RELEASE, default the path the pool was prepared with):
#
#   POOL=gpu-h100 [RELEASE=carry/h100.jsonl] [LIMIT_S=540] [DEVICES=cuda:0] [AHEAD=3] bash benchmarks/reproduction_pool.sh
#
# Measures until the pool is complete or LIMIT_S passes, appending to reproduction/pools/$POOL/measurements.jsonl
# (the next call resumes from it), then copies that file (with measurements-earlier.jsonl, where an earlier
# protocol's measurements went, and other-hardware.jsonl, where the runner set measurements aside) to $OUT.
# Put them back into reproduction/pools/$POOL/ here and run `dvc repro reproduction/dvc.yaml`: the frozen
# stage takes the new measurements as its output and the report follows. DRY_RUN=1 prints the stage's command and runs nothing.
set -uo pipefail
: "${POOL:?set POOL=gpu-h100 (a folder of reproduction/pools)}"
OUT=${OUT:-/tmp/cudal1-reproduction}
folder=reproduction/pools/$POOL
runner=(python3 -m cudal1.reproduce measure "$folder" ${RELEASE:+--release "$RELEASE"} ${DEVICES:+--devices "$DEVICES"}
        ${AHEAD:+--ahead "$AHEAD"})
if [ "${DRY_RUN:-0}" = 1 ]; then echo "timeout ${LIMIT_S:-540} ${runner[*]} > $OUT/pool.log"; exit 0; fi
mkdir -p "$OUT"
# The pool's GPU kind against this machine's, before any set-up, by the runner's own rule (it checks
# again, per device); cudal1.cross_gpu_pool imports no torch, so this takes a fraction of a second
name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
PYTHONPATH=. python3 -c 'import json, sys; from cudal1.cross_gpu_pool import names_kind
kind = json.load(open(sys.argv[1]))["gpu_kind"]
sys.exit(0 if not sys.argv[2] or names_kind(kind, sys.argv[2]) else
         f"error: this pool measures on {kind} GPUs; this machine has a {sys.argv[2]}: run it on a {kind} machine")' \
  "$folder/inputs.json" "$name" 2> >(tee "$OUT/pool.log" >&2) || exit 2
source benchmarks/gpu_setup.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
count() { if [ -f "$folder/measurements.jsonl" ]; then wc -l < "$folder/measurements.jsonl"; else echo 0; fi; }
before=$(count)
start=$(date +%s)
timeout "${LIMIT_S:-540}" "${runner[@]}" > "$OUT/pool.log" 2>&1
echo "exit $? after $(( $(date +%s) - start )) s; measurements $before -> $(count)" | tee -a "$OUT/pool.log"
pkill -9 -f 'cudal1[.]evaluator[.]worker'  # a pattern that cannot match the calling shell
for f in measurements.jsonl measurements-earlier.jsonl other-hardware.jsonl; do
  [ -f "$folder/$f" ] && cp "$folder/$f" "$OUT/$f"
done
tail -n 5 "$OUT/pool.log"
