"""Is a reference's run-to-run movement the host's launch pace or the device's own? Release references
that launch many kernels a call (the recurrent L3-37/39/41/42, launch-bound level-2 rows) read in two
levels 20-35% apart within one evaluation while their candidates hold steady
(docs/gpu-runs.md#2026-11-27-release-pair). This times each reference in this one process, pinned to the
core the timed loop would use, as the loop times a call (device-wide sync, host clock, forward,
device-wide sync), in rounds that alternate eager calls with replays of the same forward captured as one
CUDA graph (no host launches inside it). Levels that show in the eager calls and not in the replays are
the host's pace of launching; levels in both are the device's. Each block records the share of its wall
the hypervisor took from the process's cores (steal, /proc/stat); ``--probe`` times a fixed piece of
pure Python work after each call, the host CPU's own speed.

    PYTHONPATH=. python3 benchmarks/graph_levels.py --release carry/h100.jsonl --rows L3-41,L3-39,L2-25 \
        --device cuda:0 --json $OUT/graph-levels.json

Problem code only (trusted references); no candidate runs here.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.core_noise import load, timed_calls  # noqa: E402  a reference and its inputs; the loop's timing
from benchmarks.parent_load import cpu_jiffies  # noqa: E402
from cudal1.evaluator.cores import timed_core  # noqa: E402
from cudal1.evaluator.pace import probe_ms  # noqa: E402
from cudal1.problems import Problem, load_cudal1_release  # noqa: E402


def levels(ms: list[float], gap: float = 0.10, share: float = 0.10) -> dict[str, Any]:
    """Whether per-call times fall in two levels: the largest relative step between consecutive sorted
    times, taken as a split when it exceeds ``gap`` and each side holds at least ``share`` of the calls.

    >>> levels([1.0, 1.01, 1.02, 1.35, 1.36, 1.37])["split"]
    True
    >>> levels([1.0, 1.01, 1.02, 1.03, 1.04, 1.05])["split"]
    False
    """
    xs = sorted(ms)
    if len(xs) < 2:
        return {"split": False, "median": xs[0] if xs else None}
    steps = [(xs[i + 1] / xs[i] - 1, i + 1) for i in range(len(xs) - 1) if xs[i] > 0]
    step, at = max(steps) if steps else (0.0, 0)
    low, high = xs[:at], xs[at:]
    split = step > gap and min(len(low), len(high)) >= share * len(xs)
    out: dict[str, Any] = {"split": split, "median": round(statistics.median(xs), 4),
                           "spread": round(xs[-1] / xs[0] - 1, 3) if xs[0] > 0 else None}
    if split:
        out |= {"low_ms": round(statistics.median(low), 4), "high_ms": round(statistics.median(high), 4),
                "high_share": round(len(high) / len(xs), 3)}
    return out


def cpu_probe(n: int = 20_000) -> float:
    """Milliseconds of a fixed piece of pure Python work on this core: the host's own speed, no GPU in it
    (the evaluator's own reading, cudal1/evaluator/pace.py, with more work)."""
    return probe_ms(n)


def steal_ticks(cores: set[int]) -> int | None:
    """Clock ticks the hypervisor took from these cores so far (steal, /proc/stat's eighth field), or None
    where the kernel does not say (no /proc/stat, no steal column)."""
    ticks = cpu_jiffies()
    stolen = [ticks[c][2] for c in cores if c in ticks]
    return sum(stolen) if stolen else None


class Steal:
    """The share of a block's wall clock the hypervisor took from this process's cores (steal time): a
    host slow in spells because the vCPU is not running shows here; one slow for another reason (its
    clock, a sibling thread on the physical core) does not."""

    def __init__(self) -> None:
        self.cores = os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else set()
        self.tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

    def __enter__(self) -> Steal:
        self.start, self.t0, self.share = steal_ticks(self.cores), time.perf_counter(), None
        return self

    def __exit__(self, *exc: object) -> None:
        end, wall = steal_ticks(self.cores), time.perf_counter() - self.t0
        if self.start is not None and end is not None and wall > 0 and self.cores:
            self.share = round((end - self.start) / self.tick / wall / len(self.cores), 4)


def correlation(xs: list[float], ys: list[float], digits: int = 3) -> float | None:
    """Pearson's r of two equally long series to ``digits`` (None when either is constant).

    >>> correlation([1.0, 2.0, 3.0], [2.0, 4.0, 6.5])
    0.998
    >>> correlation([1.0, 2.0], [3.0, 3.0]) is None
    True
    """
    try:
        return round(statistics.correlation(xs, ys), digits)
    except statistics.StatisticsError:
        return None


def captured(model: torch.nn.Module, inputs: list[Any]) -> tuple[Callable[[], Any] | None, str]:
    """The forward captured as one CUDA graph (warmed on a side stream first, as capture requires), or
    None and why not."""
    try:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), torch.no_grad():
            for _ in range(3):
                model(*inputs)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph), torch.no_grad():
            model(*inputs)
        return graph.replay, ""
    except Exception as exc:  # noqa: BLE001 - a reference that cannot be captured is reported, not fatal
        torch.cuda.synchronize()
        return None, f"{type(exc).__name__}: {exc}"[:300]


def measure_row(model: torch.nn.Module, inputs: list[Any], rounds: int, calls: int, cuda: bool,
                probe: bool = False) -> dict[str, Any]:
    """Eager calls and graph replays in alternating rounds (which goes first alternates too); with
    ``probe``, a fixed piece of CPU work timed after each call, and how the calls' times follow it."""
    sync = torch._C._cuda_synchronize if cuda else (lambda: None)
    with torch.no_grad():
        for _ in range(5):
            model(*inputs)

        def eager() -> Any:
            return model(*inputs)

        replay, why = captured(model, inputs) if cuda else (None, "no CUDA graphs off the GPU")
        kinds: dict[str, Callable[[], Any]] = {"eager": eager} | ({"graph": replay} if replay is not None else {})
        per_round: dict[str, list[list[float]]] = {k: [] for k in kinds}
        probes: dict[str, list[float]] = {k: [] for k in kinds}
        steal: dict[str, list[float | None]] = {k: [] for k in kinds}
        for r in range(rounds):
            for kind in (list(kinds) if r % 2 == 0 else list(reversed(kinds))):
                after = (lambda k=kind: probes[k].append(round(cpu_probe(), 4))) if probe else None
                with Steal() as stolen:
                    ms = timed_calls(kinds[kind], calls, sync, after)
                per_round[kind].append([round(x, 4) for x in ms])
                steal[kind].append(stolen.share)
    out: dict[str, Any] = {"graph_error": why} if why else {}
    for kind, rs in per_round.items():
        flat = [x for r in rs for x in r]
        out[kind] = {"ms": rs, "round_medians": [round(statistics.median(x), 4) for x in rs],
                     "levels": levels(flat), "steal_share_rounds": steal[kind]}
        if probe:
            out[kind] |= {"probe_ms": probes[kind], "probe_levels": levels(probes[kind]),
                          "probe_round_medians": [round(statistics.median(probes[kind][i * calls:(i + 1) * calls]), 4)
                                                  for i in range(rounds)],
                          "calls_follow_probe_r": correlation(flat, probes[kind])}
    return out


def lag1(xs: list[float], digits: int = 3) -> float | None:
    """Correlation of a series with itself one step later: near 1 where a level lasts many steps.

    >>> lag1([1.0, 1.0, 1.0, 2.0, 2.0, 2.0]), lag1([1.0, 1.0])
    (0.667, None)
    """
    return correlation(xs[:-1], xs[1:], digits) if len(xs) > 2 else None


def timeline(models: dict[str, tuple[torch.nn.Module, list[Any]]], rounds: int, calls: int, gap_s: float,
             cuda: bool) -> dict[str, Any]:
    """Every row's eager calls in each round, the rows one after another, ``gap_s`` of sleep between
    rounds: how long a reference's level lasts (its round medians' lag-1 correlation) against the gap,
    and whether the rows move together (the host or device) or each alone (the row's own state)."""
    sync = torch._C._cuda_synchronize if cuda else (lambda: None)
    series: dict[str, list[float]] = {pid: [] for pid in models}
    probes: list[float] = []
    stamps: list[float] = []
    t0 = time.perf_counter()
    with torch.no_grad():
        for model, inputs in models.values():
            for _ in range(5):
                model(*inputs)
        for _ in range(rounds):
            stamps.append(round(time.perf_counter() - t0, 3))
            probes.append(round(statistics.median(cpu_probe(3000) for _ in range(5)), 4))
            for pid, (model, inputs) in models.items():
                ms = timed_calls(lambda m=model, i=inputs: m(*i), calls, sync)
                series[pid].append(round(statistics.median(ms), 4))
            time.sleep(gap_s)
    medians = {pid: statistics.median(xs) for pid, xs in series.items()}
    # each round's rows relative to their own medians: do the rows move together?
    together = [statistics.median(series[p][r] / medians[p] for p in series) for r in range(rounds)]
    return {"gap_s": gap_s, "t_s": stamps, "probe_ms": probes, "round_medians": series,
            "rows": {pid: {"levels": levels(xs), "lag1": lag1(xs, 2), "follows_rows_r": correlation(xs, together, 2),
                           "follows_probe_r": correlation(xs, probes, 2)} for pid, xs in series.items()}}


def pinned_rows(release: Path, names: str, device_name: str, script: str
                ) -> tuple[torch.device, bool, int | None, dict[str, Problem]]:
    """The device (made current), whether it is a GPU, the core this process is now pinned to as a timed
    worker is (None off the GPU), and the release's problems by row; exits naming rows not in it."""
    device = torch.device(device_name)
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.set_device(device)
    core = timed_core(device_name) if cuda else None
    if core is not None:
        os.sched_setaffinity(0, {core})  # as a timed worker runs: one core of its own
    rows = {r.problem.problem_id: r.problem for r in load_cudal1_release(release)}
    unknown = [p for p in names.split(",") if p not in rows]
    if unknown:
        raise SystemExit(f"{script}: rows not in {release}: {', '.join(unknown)} (names like L2-41)")
    return device, cuda, core, rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--release", required=True, type=Path)
    ap.add_argument("--rows", default="L3-41,L3-42,L3-39,L3-37,L2-25,L2-53")
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--calls", type=int, default=12, help="calls of each kind per round")
    ap.add_argument("--probe", action="store_true", help="time a fixed piece of CPU work after each call: does the "
                    "host's own speed move with the calls?")
    ap.add_argument("--gap-s", type=float, default=None, help="time the rows in turn, round after round, with this "
                    "much sleep between rounds (eager calls only): how long a reference's level lasts")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    device, cuda, core, rows = pinned_rows(args.release, args.rows, args.device, "graph_levels.py")
    result: dict[str, Any] = {"device": torch.cuda.get_device_name(device) if cuda else "cpu", "core": core,
                              "rounds": args.rounds, "calls": args.calls, "rows": {}}
    if args.gap_s is not None:
        models = {pid: load(rows[pid].source, device) for pid in args.rows.split(",")}
        result["timeline"] = timeline(models, args.rounds, args.calls, args.gap_s, cuda)
        for pid, row in result["timeline"]["rows"].items():
            print(pid, json.dumps(row), flush=True)
        if args.json is not None:
            args.json.write_text(json.dumps(result, indent=1))
        return
    for pid in args.rows.split(","):
        model, inputs = load(rows[pid].source, device)
        row = measure_row(model, inputs, args.rounds, args.calls, cuda, args.probe)
        result["rows"][pid] = row
        summary = {k: {n: v[n] for n in ("round_medians", "levels", "probe_round_medians", "calls_follow_probe_r",
                                         "steal_share_rounds")
                       if n in v} for k, v in row.items() if isinstance(v, dict)}
        print(pid, json.dumps(summary | ({"graph_error": row["graph_error"]} if "graph_error" in row else {})),
              flush=True)
        del model, inputs
        if cuda:
            torch.cuda.empty_cache()
    if args.json is not None:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
