source benchmarks/gpu_setup.sh > /tmp/setup.log 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nproc; date -u; lscpu | grep "Model name"; git log --oneline -1 2>/dev/null
mkdir -p $OUT/ov; lscpu > $OUT/ov/lscpu.txt
OUT=$OUT/ov STEPS="overhead evalone" RELEASE=carry/h100.jsonl timeout 110 bash benchmarks/evaluator_gpu.sh 2>&1 | tail -n 8
rm -f $OUT/ov/results.tgz; tar czf $OUT/ov.tgz -C $OUT ov && rm -rf $OUT/ov
date -u
RUN=/tmp/rel/qcold MIRROR=$OUT EXTRA="--call-pace" LIMIT_S=${LIM:-440} bash benchmarks/release_resume.sh 2>&1 | tail -n 3 | cut -c1-400
date -u
