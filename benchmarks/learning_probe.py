"""benchmarks/learning_gpu.py with each RL reward call's evaluations written out: status, seconds and phases per
program (the corpus measurement's call left out), as one JSON line after learning_gpu.py's own. On the GPU machine:

    WHEELS=carry/wheels source benchmarks/gpu_setup.sh; python3 benchmarks/learning_probe.py > $OUT/probe.log

Each call's record also holds when its evaluations were recorded (seconds after the call began: the
first one's is the batch's start, the wall after the last one its end) and, with ``--stacks``, where the
device loop's thread was, sampled every 5 ms (benchmarks/parent_load.py).
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import benchmarks.learning_gpu as lg  # noqa: E402
import cudal1.evaluator.batch as batch  # noqa: E402
import cudal1.training.evaluation as ev  # noqa: E402
from benchmarks.parent_load import ParentLoad  # noqa: E402

calls: list[dict[str, Any]] = []
real = ev.evaluator_fn
PHASES = ("row_s", "timing_s", "batches_s", "correctness_s", "load_cmd_s", "wait_s", "first_call_s", "prepare_s",
          "build_wait_s", "group_wait_s", "reference_wait_s", "ready_wait_s", "load_s", "iters_per_trial",
          "settled_statically")
STACKS = "--stacks" in sys.argv
recorded: list[float] = []  # when each evaluation of the current call was recorded (perf_counter)
_add_all = batch._Sink.add_all


def _stamped(sink: Any, evaluations: Any) -> None:
    recorded.extend([time.perf_counter()] * len(evaluations))
    _add_all(sink, evaluations)


def probed(config: Any, devices: Any = ("cpu",)) -> Any:
    """``evaluator_fn`` whose every call is recorded in ``calls``."""
    fn = real(config, devices)

    def evaluate(problems: Any, candidates: Any) -> Any:
        recorded.clear()
        t = time.perf_counter()
        with ParentLoad(stacks=STACKS) as parent:
            found = fn(problems, candidates)
        wall = time.perf_counter() - t
        call: dict[str, Any] = {"wall_s": round(wall, 3), "recorded_at_s": [round(r - t, 3) for r in recorded],
                                "rows": [{"status": e.status.value, "eval_s": round(e.eval_s or 0, 3),
                                          "reason": (e.reason or "")[:60],
                                          **{k: v for k, v in (e.extra or {}).items() if k in PHASES}}
                                         for e in found]}
        if STACKS:
            call["stacks"] = parent.summary().get("stacks")
        calls.append(call)
        return found

    return evaluate


if __name__ == "__main__":
    ev.evaluator_fn = probed  # learning_gpu.py imports it from the module at each call
    batch._Sink.add_all = _stamped  # type: ignore[method-assign]
    sys.argv = ["learning_gpu.py", "--device", "cuda:0", "--problems", "6", "--sft-epochs", "20", "--out", "/tmp/lgpu"]
    lg.main()
    print(json.dumps({"probe": calls[1:]}))  # calls[0] is the corpus measurement
