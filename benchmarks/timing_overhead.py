"""Where a timed call's time goes besides the program itself: each step of the worker's timed loop
(cudal1/evaluator/worker.py, time_trial) timed on its own, in one process, for chosen problems; and the
harness overhead per call as the protocol pays it: the wall clock of a whole timed batch
(``Worker.time_trial``) per call, less the timed forward (as the protocol times it) and the L2 flush, with
the protocol's own calls per trial (``protocol_calls``; ``harness_overhead_us_20_calls``: 20 a batch,
as first measured; ``harness_overhead_us_call_pace``: with EvalConfig.call_pace's probe before each call),
on the default EvalConfig (inputs and flush as a captured graph, the host's clock);
on CUDA also the earlier loop (eager inputs, CUDA events: ``harness_overhead_us_eager_events``) and the
host cost of single torch calls (``primitives_us``).

Run M (docs/reproduction/h100.md) spent 706 s timing 161 rows, of which 82 s were the timed calls and
624 s everything around them (median 1.35 ms a call): this script says which step that is.

    PYTHONPATH=. python benchmarks/timing_overhead.py --release ../shared/cuda-l1/h100.jsonl \
        --rows L1-92,L2-46,L1-64,L1-1 --device cuda:0 --json $OUT/overhead.json
    python benchmarks/timing_overhead.py --problems starter --device cpu     # the CPU machine
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.core_noise import timed_calls  # noqa: E402  sync, host clock, step, sync
from cudal1.evaluator.config import EvalConfig  # noqa: E402
from cudal1.evaluator.core import calls_per_trial  # noqa: E402
from cudal1.evaluator.probes import Fingerprints, fingerprint, flatten  # noqa: E402
from cudal1.evaluator.worker import Worker  # noqa: E402
from cudal1.evaluator.workers import draws_path, new_seed  # noqa: E402
from cudal1.problems import Problem, load_cudal1_release, load_problems  # noqa: E402


def _median_ms(step: Callable[[], Any], sync: Callable[[], None], repeats: int) -> float:
    return statistics.median(timed_calls(step, repeats, sync))


def _load(problem: Problem, device: torch.device, device_draws: bool = EvalConfig.device_draws) -> Worker:
    """The problem's reference in a worker, loaded as the default EvalConfig loads it (graph inputs asked
    for: the eager path stays available through ``_inputs_for`` and by dropping ``graphed``); with the
    harness's draw kernels where ``device_draws`` and they compile (``worker.counted``)."""
    with tempfile.TemporaryDirectory(prefix="cudal1-overhead-") as tmp:
        path = Path(tmp) / "reference.py"
        path.write_text(problem.source)
        worker = Worker(str(device), 1, flush_l2=True)
        config = EvalConfig(device=str(device), device_draws=device_draws)
        reply = worker.load({"role": "reference", "reference_path": str(path), "init_seed": 0,
                             "graph_inputs": EvalConfig.graph_inputs, "device_draws": draws_path(config)})
        if not reply.get("ok"):
            raise RuntimeError(f"reference did not load: {reply}")
    return worker


def profile(problem: Problem, device: torch.device, repeats: int) -> dict[str, float]:
    """Median ms of each step of one timed call, the forward included for scale: the worker's own
    methods, on the problem's reference (trusted problem code) loaded as the worker loads it."""
    worker = _load(problem, device)
    cuda = device.type == "cuda"
    sync = worker._sync
    x = worker._inputs_for(1234)
    with torch.no_grad():
        _, outputs = flatten(worker._forward(x))
    flush = worker.l2
    assert flush is not None
    steps: dict[str, Callable[[], Any]] = {
        "inputs": lambda: worker._inputs_for(1234),
        "forward": lambda: worker._forward(x),
        "fingerprint": lambda: fingerprint(outputs, 99),
        "sync": lambda: None,
    }
    if cuda:
        steps["l2_flush"] = flush  # zero_ of 2x L2, plus the persisting-L2 reset below when the driver loads
        if flush.driver is not None:
            steps["l2_persisting_reset"] = lambda: (flush.driver.cuCtxSetLimit(0x06, 0),  # type: ignore[union-attr]
                                                    flush.driver.cuCtxResetPersistingL2Cache())  # type: ignore[union-attr]

        def events() -> None:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            end.record()
            end.synchronize()
            start.elapsed_time(end)

        steps["events"] = events
    with torch.no_grad():
        result = {name: round(_median_ms(step, sync, repeats), 4) for name, step in steps.items()}
    # l2_flush already holds the persisting reset: count it once
    result["outside_forward"] = round(sum(v for k, v in result.items() if k not in ("forward", "l2_persisting_reset")), 4)
    # The overhead as an evaluation pays it: the default EvalConfig (inputs and flush as a captured graph
    # where one stands in, the host's clock), the protocol's own calls per trial (per-batch costs spread
    # over that many calls); then 20 calls a batch as first measured, and eager inputs with CUDA events
    # (the loop before the graph and the host clock) for comparison.
    result["graphed"] = worker.graphed is not None
    calls = protocol_calls(worker)
    result |= batch_overhead(worker, calls=calls) | {"protocol_calls": calls}
    result["harness_overhead_us_20_calls"] = batch_overhead(worker, calls=20)["harness_overhead_us"]
    # with EvalConfig.call_pace: the host's pace probed before each call (pace.CALL_PROBE_STEPS)
    result["harness_overhead_us_call_pace"] = batch_overhead(worker, calls=calls, call_pace=True)["harness_overhead_us"]
    result["loop_us"] = loop_breakdown(worker, calls=max(repeats, 20) * 5)
    result["input_plan"] = worker.plan is not None
    result["device_draws"] = worker.counted is not None
    if cuda and worker.counted is not None:  # the same loop on torch's generators, in a worker of its own
        torch_draws = _load(problem, device, device_draws=False)
        result["harness_overhead_us_torch_draws"] = batch_overhead(torch_draws, calls=calls)["harness_overhead_us"]
        del torch_draws
    if cuda:
        worker.graphed, worker.counted = None, None  # torch's eager draws, as the loop was
        result["harness_overhead_us_eager_events"] = batch_overhead(worker, calls=calls, clock="events")["harness_overhead_us"]
        result["primitives_us"] = primitives()
    return result


def protocol_calls(worker: Worker) -> int:
    """Calls per trial as the parent chooses them under the default protocol (core.calls_per_trial, from
    a two-call batch), so a trial lasts about target_trial_ms."""
    reply = worker.time_trial({"cmd": "time", "warmup_seeds": [new_seed()], "seeds": [new_seed(), new_seed()],
                               "spot": [], "print_key": new_seed(), "device_draws": worker.counted is not None})
    return calls_per_trial(EvalConfig(), [reply])


def primitives(repeats: int = 2000) -> dict[str, float]:
    """The host's cost of single torch calls the timed loop is made of, median microseconds: what a loop
    of such calls can cost at least on this machine."""
    x, y = torch.zeros(16, device="cuda"), torch.zeros(16, device="cuda")
    ev = torch.cuda.Event(enable_timing=True)
    stream = torch.cuda.current_stream()
    gen = torch.cuda.default_generators[torch.cuda.current_device()]
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y.zero_()
    calls: dict[str, Callable[[], Any]] = {
        "perf_counter": time.perf_counter, "event_record": lambda: ev.record(stream),
        "cuda_synchronize": torch.cuda.synchronize, "raw_synchronize": torch._C._cuda_synchronize,
        "copy_16": lambda: y.copy_(x), "zero_16": y.zero_, "manual_seed_cuda": lambda: gen.manual_seed(5),
        "graph_replay": graph.replay, "detach": x.detach, "no_grad_enter_exit": lambda: torch.no_grad().__enter__(),
    }
    out = {}
    for name, call in calls.items():
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            call()
            times.append(time.perf_counter() - t0)
        torch.cuda.synchronize()
        out[name] = round(statistics.median(times) * 1e6, 2)
    return out


def loop_breakdown(worker: Worker, calls: int) -> dict[str, float]:
    """The host's time in each step of the timed loop, in the loop's own order (as Worker.time_trial
    runs it on the default config: graphed inputs where captured, the host's clock), median microseconds
    over ``calls``: where the harness overhead is spent. A sync step also holds the device work queued
    before it (inputs, the L2 flush; the forward)."""
    cuda = worker.device.type == "cuda"
    flush, graph, model = worker.l2, worker.graphed, worker.model
    assert flush is not None and model is not None
    kernels = worker.counted.kernels if worker.counted is not None else None
    prints = Fingerprints(worker.device, new_seed(), calls=calls, kernels=kernels)  # the sums as time_trial takes them
    steps: dict[str, list[float]] = {}
    seeds = [new_seed() for _ in range(calls)]
    if worker.counted is not None:
        worker.counted.start(seeds[0])
    worker._sync()
    stamps: list[tuple[str, float]] = []

    def mark(name: str) -> None:
        stamps.append((name, time.perf_counter()))

    with torch.no_grad():
        for seed in seeds:
            stamps[:] = [("", time.perf_counter())]
            if graph is not None:
                flush.reset_persisting()
                mark("persisting_query")
                x = graph.draw(seed)
                mark("graph_inputs_and_flush")
            else:
                x = worker._inputs_for(seed)
                mark("inputs")
                if cuda:
                    flush._persisting()
                    mark("persisting_query")
                flush()
                mark("l2_flush_call")
            worker._sync()
            mark("sync_before")
            out = model(*x)
            mark("forward_launch")
            worker._sync()
            mark("sync_after")
            _, outputs = flatten(out)
            fake = [o for o in outputs if isinstance(o, torch.Tensor) and type(o) is not torch.Tensor]
            mark("flatten_check")
            prints.add(outputs, seed)
            mark("fingerprint_stage")
            del out, x, outputs, fake
            mark("release")
            for (_, t0), (name, t1) in zip(stamps, stamps[1:]):
                steps.setdefault(name, []).append((t1 - t0) * 1e6)
    t0 = time.perf_counter()
    prints.values()
    medians = {k: round(statistics.median(v), 1) for k, v in steps.items()}
    medians["fingerprint_sums_per_call"] = round((time.perf_counter() - t0) * 1e6 / calls, 1)
    return medians


def batch_overhead(worker: Worker, calls: int, batches: int = 5, clock: str = "host",
                   call_pace: bool = False) -> dict[str, float]:
    """The protocol's own timed batch, as the parent sends it: wall clock per call minus the timed
    forward and the L2 flush (what the harness adds beside them), median over batches."""
    cuda = worker.device.type == "cuda"
    flush_ms = 0.0
    if cuda:
        assert worker.l2 is not None
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        worker._sync()
        start.record()
        for _ in range(20):
            worker.l2()
        end.record()
        end.synchronize()
        flush_ms = start.elapsed_time(end) / 20
    per_call, forward, overhead = [], [], []
    for _ in range(batches):
        msg = {"cmd": "time", "warmup_seeds": [new_seed()], "seeds": [new_seed() for _ in range(calls)],
               "spot": [], "print_key": new_seed(), "clock": clock, "device_draws": worker.counted is not None,
               "call_pace": call_pace}
        worker.time_trial(msg | {"seeds": msg["seeds"][:2]})  # warm-up batch: first-call effects out
        t0 = time.perf_counter()
        reply = worker.time_trial(msg)
        wall_ms = (time.perf_counter() - t0) * 1e3
        timed_ms = statistics.median(reply["ms"])
        per_call.append(wall_ms / calls)
        forward.append(timed_ms)
        overhead.append(wall_ms / calls - timed_ms - flush_ms)
    return {"batch_per_call_ms": round(statistics.median(per_call), 4),
            "batch_forward_ms": round(statistics.median(forward), 4), "l2_flush_ms": round(flush_ms, 4),
            "harness_overhead_us": round(statistics.median(overhead) * 1e3, 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--release", type=Path, help="a CUDA-L1 release JSONL (its references are profiled)")
    ap.add_argument("--problems", default="", help="a suite instead, e.g. starter")
    ap.add_argument("--rows", default="", help="comma-separated problem ids (default: all)")
    ap.add_argument("--device", default="cuda:0" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.release:
        problems = [r.problem for r in load_cudal1_release(args.release)]
    elif args.problems:
        problems = load_problems(args.problems)
    else:
        sys.exit("--release or --problems: which problems to profile")
    if args.rows:
        wanted = set(args.rows.split(","))
        problems = [p for p in problems if p.problem_id in wanted]
    device = torch.device(args.device)
    report = {}
    for problem in problems:
        try:
            report[problem.problem_id] = profile(problem, device, args.repeats)
        except Exception as exc:  # one problem's failure should not lose the others' figures
            report[problem.problem_id] = {"error": f"{type(exc).__name__}: {exc}"[:200]}
        print(problem.problem_id, report[problem.problem_id], flush=True)
        if device.type == "cuda":
            torch.cuda.empty_cache()
    overheads = [r["harness_overhead_us"] for r in report.values() if "harness_overhead_us" in r]
    if overheads:
        report["_summary"] = {"device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
                              "problems": len(overheads),
                              "harness_overhead_us_median": round(statistics.median(overheads), 1)}
        for key in ("harness_overhead_us_20_calls", "harness_overhead_us_call_pace", "harness_overhead_us_eager_events",
                    "harness_overhead_us_torch_draws",
                    "protocol_calls"):
            values = [r[key] for r in report.values() if key in r]
            if values:
                report["_summary"][f"{key}_median"] = round(statistics.median(values), 1)
        print("summary", report["_summary"], flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
