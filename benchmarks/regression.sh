#!/usr/bin/env bash
# The first N rows of a release (default 40), cold then warm, measured on the tree before a change and on
# this tree, on one GPU in one call, interleaved: cold-before, cold-after, warm-before, warm-after. From the
# repository root on the GPU machine, BEFORE a copy of the earlier tree (e.g. `git archive COMMIT | tar -x -C
# carry/before`, carried along):
#
#   BEFORE=carry/before [N=40] [REPEAT=1] [RELEASE=carry/h100.jsonl] [DEVICES=cuda:0] [CALL_S=540] \
#       [COMMIT=abc1234 BEFORE_COMMIT=def5678] bash benchmarks/regression.sh
#
# Each run is benchmarks/release_run.sh's (its own session; a call that ends first leaves it running, and
# calling this script again on the same machine waits on it: exit 3 while one still runs). Each tree runs
# its own benchmarks/release_eval.py with PYTHONPATH=its tree and its own build cache (TMPDIR), with only
# the options both trees' release_eval.py understand: --release --devices --out --limit, and --agree-with
# where both have it. REPEAT=1 adds a second warm run of each side (before/warm2, after/warm2): one pair's
# agreement is a noisy sample, three pairs a side are less so. Each pair's agreement is printed; once all are
# done, release_bench.py --regression writes $OUT/regression-<N>/result.json, and the runs' small files come
# back packed as $OUT/regression-<N>-runs.tgz: unpack them beside it in results/regression-<N>.
# DRY_RUN=1 prints the runs' commands.
set -uo pipefail
: "${BEFORE:?BEFORE=a copy of the tree before the change}"
N=${N:-40}
OUT=${OUT:-/tmp/cudal1-regression}
WORK=${WORK:-/tmp/regression}
RELEASE=${RELEASE:-carry/h100.jsonl}
T0=$(date +%s)
left() { echo $(( ${CALL_S:-540} - ($(date +%s) - T0) )); }
dry() { [ "${DRY_RUN:-0}" = 1 ]; }
[ -f "$BEFORE/benchmarks/release_eval.py" ] || { echo "regression.sh: $BEFORE has no benchmarks/release_eval.py" >&2; exit 2; }
agree=1
grep -q -- "--agree-with" "$BEFORE/benchmarks/release_eval.py" || agree=0
if ! dry; then
  source benchmarks/gpu_setup.sh > /tmp/regression-setup.log 2>&1
  mkdir -p "$OUT" "$WORK/tmp-before" "$WORK/tmp-after"
  chmod 1777 "$WORK/tmp-before" "$WORK/tmp-after"  # each tree's build cache; workers run as other uids
  # the earlier tree as gpu_setup.sh left this one: bytecode in the prefix, readable by the sandboxed workers
  python3 -m compileall -q "$BEFORE/cudal1" > /dev/null 2>&1
  chmod -R o+rX "$BEFORE"
  d=$(realpath "$BEFORE"); while [ "$d" != / ]; do chmod o+x "$d"; d=$(dirname "$d"); done
fi
specs="before/cold after/cold before/warm after/warm"
[ "${REPEAT:-0}" = 1 ] && specs="$specs before/warm2 after/warm2"
for spec in $specs; do
  IFS=/ read -r side step <<< "$spec"
  tree=.; [ "$side" = before ] && tree=$BEFORE
  echo "== $side $step"
  TMPDIR=$WORK/tmp-$side RUN=$WORK/$side STEPS=$step TREE=$tree LIMIT=$N COSTS=0 AGREE=$agree RELEASE=$RELEASE \
    DEVICES=${DEVICES:-cuda:0} UNTIL_S=$(left) bash benchmarks/release_run.sh || exit $?
done
dry && exit 0
dest=$OUT/regression-$N
steps="cold warm"; repeat=()
if [ "${REPEAT:-0}" = 1 ]; then steps="cold warm warm2"; repeat=(--repeat "$dest"/before/warm2 "$dest"/after/warm2); fi
for side in before after; do
  for step in $steps; do
    mkdir -p "$dest/$side/$step" && cp -p "$WORK/$side/$step"/{results.jsonl,summary.json,calls.jsonl} "$dest/$side/$step/"
  done
done
tar czf "$OUT/regression-$N-runs.tgz" -C "$dest" before after  # $OUT/a/b/c files do not come back from a device
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
python3 benchmarks/release_bench.py --regression "$dest"/before/cold "$dest"/before/warm "$dest"/after/cold \
  "$dest"/after/warm "${repeat[@]}" --out "$dest" --commit "${COMMIT:-unknown}" --hardware "1x $gpu ($(nproc) cores)" \
  --title "The first $N rows of the CUDA-L1 release before and after a change, cold then warm" \
  --command "BEFORE=carry/before N=$N bash benchmarks/regression.sh" \
  --notes "before: tree ${BEFORE_COMMIT:-unknown}; after: tree ${COMMIT:-unknown}; one call, interleaved."
