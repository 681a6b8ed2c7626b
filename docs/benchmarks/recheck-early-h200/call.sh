# The calls of this run, as run: the steps of benchmarks/release_pair_call.sh without its overhead step (OV=0;
# this run measured the overhead and `evaluate-one` in a fourth call of its own).
OV=0 exec bash benchmarks/release_pair_call.sh "$@"
