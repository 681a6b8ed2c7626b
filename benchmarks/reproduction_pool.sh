#!/usr/bin/env bash
# One pool of the reproduction (reproduction.yaml) on a GPU machine that has torch but no Prefect, from the
# repository root, with the staged storage carried along (data/reproduction/<key>, written here by
# `python -m flows.cross_gpu --params reproduction.yaml --stage`):
#
#   POOL=data/reproduction/<key>/gpu-h100 [LIMIT_S=540] [DEVICES=cuda:0] [AHEAD=3] bash benchmarks/reproduction_pool.sh
#
# Runs the torch-only pool runner until it finishes or LIMIT_S passes (it resumes from the carried
# measurements.jsonl next time), then copies the pool's files to $OUT: put them back into the same pool
# folder here (and into docs/reproduction/pools/<key>/<pool>/ to keep them) and, once every pool is
# complete, run `python -m flows.cross_gpu --params reproduction.yaml --gather`. DRY_RUN=1 prints the
# runner's command and runs nothing.
set -uo pipefail
: "${POOL:?set POOL=data/reproduction/<key>/<pool>}"
OUT=${OUT:-/tmp/cudal1-reproduction}
runner=(python3 -m cudal1.cross_gpu_pool "$POOL" ${DEVICES:+--devices "$DEVICES"} ${AHEAD:+--ahead "$AHEAD"})
if [ "${DRY_RUN:-0}" = 1 ]; then echo "timeout ${LIMIT_S:-540} ${runner[*]} > $OUT/pool.log"; exit 0; fi
mkdir -p "$OUT"
# The pool's GPU kind against this machine's, before any set-up, by the runner's own rule (it checks
# again, per device); cudal1.cross_gpu_pool imports no torch, so this takes a fraction of a second
name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1)
PYTHONPATH=. python3 -c 'import json, sys; from cudal1.cross_gpu_pool import names_kind
kind = json.load(open(sys.argv[1]))["gpu_kind"]
sys.exit(0 if not sys.argv[2] or names_kind(kind, sys.argv[2]) else
         f"error: this pool measures on {kind} GPUs; this machine has a {sys.argv[2]}: run it on a {kind} machine")' \
  "$POOL/pool.json" "$name" 2> >(tee "$OUT/pool.log" >&2) || exit 2
source benchmarks/gpu_setup.sh
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/gpu.txt" 2>&1
# Measurements committed from earlier calls (docs/reproduction/pools/<key>/<pool>/) seed a pool folder
# that has none, so a fresh checkout resumes where the last call stopped.
kept=docs/reproduction/pools/$(basename "$(dirname "$POOL")")/$(basename "$POOL")/measurements.jsonl
if [ ! -f "$POOL/measurements.jsonl" ] && [ -f "$kept" ]; then cp "$kept" "$POOL/measurements.jsonl"; fi
count() { if [ -f "$POOL/measurements.jsonl" ]; then wc -l < "$POOL/measurements.jsonl"; else echo 0; fi; }
before=$(count)
start=$(date +%s)
timeout "${LIMIT_S:-540}" "${runner[@]}" > "$OUT/pool.log" 2>&1
echo "exit $? after $(( $(date +%s) - start )) s; measurements $before -> $(count)" | tee -a "$OUT/pool.log"
pkill -9 -f 'cudal1[.]evaluator[.]worker'  # a pattern that cannot match the calling shell
for f in measurements.jsonl evaluations.jsonl; do
  [ -f "$POOL/$f" ] && cp "$POOL/$f" "$OUT/$f"
done
tail -n 5 "$OUT/pool.log"
