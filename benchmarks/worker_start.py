"""What a fresh evaluation worker's start costs: in this process, the first CUDA use (the context) and the
harness's kernels' first launches (``probes.warm_kernels``), each timed alone; then N workers started at once
from the fork server as a batch starts them (``WorkerProcess``, the batch's spec), each one's wait until it
says it is ready, for N = 1, 2, 4, 8, three rounds. Prints one JSON object.

    PYTHONPATH=. python3 benchmarks/worker_start.py --device cuda:0
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()

    import torch

    from cudal1.evaluator.config import EvalConfig
    from cudal1.evaluator.probes import warm_kernels
    from cudal1.evaluator.process import WorkerProcess
    from cudal1.evaluator.workers import worker_spec

    out: dict[str, object] = {"device": args.device}
    device = torch.device(args.device)
    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    t0 = time.perf_counter()
    torch.zeros(1, device=device)
    sync()
    t1 = time.perf_counter()
    warm_kernels(device)
    sync()
    t2 = time.perf_counter()
    out["this_process"] = {"first_cuda_use_s": round(t1 - t0, 3), "warm_kernels_s": round(t2 - t1, 3)}

    spec = worker_spec(EvalConfig(device=args.device))
    root = Path(tempfile.mkdtemp(prefix="cudal1-start-"))
    root.chmod(0o711)
    starts: dict[int, list[float]] = {}
    try:
        # one worker first: the fork server's own start is not a worker's
        first = WorkerProcess(spec, root / "first", "w")
        first.wait_ready(120)
        first.close()
        for _ in range(args.rounds):
            for n in (1, 2, 4, 8):
                t = time.perf_counter()
                workers = [WorkerProcess(spec, root / f"w{n}-{i}-{time.monotonic_ns()}", "w") for i in range(n)]
                for w in workers:
                    w.wait_ready(120)
                    starts.setdefault(n, []).append(round(time.perf_counter() - t, 3))
                for w in workers:
                    w.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    out["ready_after_s"] = {str(n): {"median": statistics.median(v), "max": max(v), "all": v} for n, v in starts.items()}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
