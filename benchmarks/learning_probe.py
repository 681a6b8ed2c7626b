"""benchmarks/learning_gpu.py with each RL reward call's evaluations written out: status, seconds and phases per
program (the corpus measurement's call left out), as one JSON line after learning_gpu.py's own. On the GPU machine:

    WHEELS=carry/wheels source benchmarks/gpu_setup.sh; python3 benchmarks/learning_probe.py > $OUT/probe.log
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import benchmarks.learning_gpu as lg  # noqa: E402
import cudal1.training.evaluation as ev  # noqa: E402

calls: list[dict[str, Any]] = []
real = ev.evaluator_fn
PHASES = ("row_s", "timing_s", "batches_s", "correctness_s", "load_cmd_s", "wait_s", "first_call_s", "prepare_s")


def probed(config: Any, devices: Any = ("cpu",)) -> Any:
    """``evaluator_fn`` whose every call is recorded in ``calls``."""
    fn = real(config, devices)

    def evaluate(problems: Any, candidates: Any) -> Any:
        t = time.perf_counter()
        found = fn(problems, candidates)
        calls.append({"wall_s": round(time.perf_counter() - t, 3), "rows": [
            {"status": e.status.value, "eval_s": round(e.eval_s or 0, 3), "reason": (e.reason or "")[:60],
             **{k: v for k, v in (e.extra or {}).items() if k in PHASES}}
            for e in found]})
        return found

    return evaluate


if __name__ == "__main__":
    ev.evaluator_fn = probed  # learning_gpu.py imports it from the module at each call
    sys.argv = ["learning_gpu.py", "--device", "cuda:0", "--problems", "6", "--sft-epochs", "20", "--out", "/tmp/lgpu"]
    lg.main()
    print(json.dumps({"probe": calls[1:]}))  # calls[0] is the corpus measurement
