source benchmarks/gpu_setup.sh > /tmp/setup.log 2>&1
date -u
[ -f /tmp/rel/qcold/results.jsonl ] || { echo "LOST the machine: cold run not found"; exit 3; }
RUN=/tmp/rel/qwarm AGREE_WITH=/tmp/rel/qcold MIRROR=$OUT EXTRA="--call-pace" LIMIT_S=${LIM:-570} bash benchmarks/release_resume.sh 2>&1 | tail -n 3 | cut -c1-400
python3 benchmarks/agreement_split.py /tmp/rel/qcold /tmp/rel/qwarm 2>&1 | grep "rows ok in both\|reasons\|spreads"
date -u
