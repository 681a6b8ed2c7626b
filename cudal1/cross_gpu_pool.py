"""One pool's share of a cross-GPU run, with torch and this package only: the GPU hosts of a reproduction
need neither Prefect nor polars.

The cross_gpu flow stages ``<storage>/<key>/inputs/{problems,candidates}.jsonl`` and, per pool,
``<storage>/<key>/<pool>/pool.json`` (its GPU kind, devices and protocol) beside the parquet inputs and
``params.yaml`` that a Prefect worker's evaluate flow reads. On a host of that GPU kind, with the storage
mounted (or copied there and back)::

    PYTHONPATH=. python -m cudal1.cross_gpu_pool <storage>/<key>/<pool> [--devices cuda:0,cuda:1]

evaluates every candidate there, appending each evaluation to ``measurements.jsonl`` as it lands (a
killed run resumes from it), and writes ``evaluations.jsonl`` when every candidate has one: the pool's
completed result, which ``python -m flows.cross_gpu --gather`` turns into the table with the other
pools'. ``python -m flows.cross_gpu --local --pool <pool>`` runs the same function from the flow.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from cudal1.candidates import Candidate, Evaluation, load_evaluations, save_evaluations
from cudal1.evaluator.config import EvalConfig
from cudal1.problems import Problem

POOL_FILE = "pool.json"
MEASUREMENTS = "measurements.jsonl"  # appended after every evaluation
COMPLETED = "evaluations.jsonl"  # written once every candidate has an evaluation
ELSEWHERE = "other-hardware.jsonl"  # measurements set aside: made on hardware other than the pool's kind


def on_kind(gpu_kind: str, evaluation: Evaluation) -> bool:
    """Whether an evaluation was measured on the pool's GPU kind: the kind is a whole word of the CUDA
    device's name, in any case ('H100' in 'NVIDIA H100 80GB HBM3'; 'H20' is not in 'NVIDIA H200'). A
    measurement on a CPU device counts (a pool staged with cpu devices: tests, dry runs)."""
    return not evaluation.device.startswith("cuda") or names_kind(gpu_kind, evaluation.device_name)


def names_kind(gpu_kind: str, device_name: str) -> bool:
    return re.search(rf"(?<![0-9a-z]){re.escape(gpu_kind.lower())}(?![0-9a-z])", device_name.lower()) is not None


def check_devices(gpu_kind: str, devices: Sequence[str]) -> None:
    """Refuse a pool's run on a GPU of another kind: its measurements would be recorded as the pool's
    (a run of an H200 pool on an H100 measured 129 evaluations there before this
    check, docs/gpu-runs.md at 88f971b, 2026-11-25-wrong-kind)."""
    from cudal1.evaluator.workers import device_name

    names = {d: device_name(d) for d in devices if d.startswith("cuda")}
    wrong = [f"{d} is {'not available here' if name == 'cpu' else 'a ' + name}" for d, name in names.items()
             if not names_kind(gpu_kind, name)]
    if wrong:
        raise ValueError(f"this pool measures on {gpu_kind} GPUs, but {'; '.join(wrong)}: run it on a {gpu_kind} "
                         f"machine, or stage the pool with a gpu_kind that is a word of the device's name")


def set_aside(measurements: Path, gpu_kind: str) -> int:
    """Move measurements made on hardware other than the pool's kind out of ``measurements`` (into
    ``other-hardware.jsonl`` beside it, nothing lost), so a resumed run measures those candidates again."""
    return move_rows(measurements, ELSEWHERE, lambda row: on_kind(gpu_kind, Evaluation.from_row(row)))


def move_rows(measurements: Path, to: str, stays: Callable[[dict[str, Any]], bool]) -> int:
    """Move the rows of the JSON-lines file ``measurements`` that ``stays`` refuses to the end of the file
    ``to`` beside it, each line as it was; a line that does not parse stays where it is (the runner rewrites
    the file whole and renames it, so none is expected: this is not the place to judge one). Returns
    how many moved. Stopped between its two writes, it leaves the moved rows in both files: the same
    evaluations, counted once."""
    if not measurements.is_file():
        return 0
    kept, moved = [], []
    for line in measurements.read_text().splitlines(keepends=True):
        try:
            goes = not stays(json.loads(line))
        except json.JSONDecodeError:
            goes = False
        (moved if goes else kept).append(line)
    if moved:
        with measurements.with_name(to).open("a") as out:
            out.write("".join(moved))
        tmp = measurements.with_name("tmp-" + measurements.name)
        tmp.write_text("".join(kept))
        os.replace(tmp, measurements)
    return len(moved)


def write_jsonl(records: Iterable[Any], path: Path) -> None:
    tmp = path.with_suffix(path.suffix + ".partial")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp.write_text("".join(json.dumps(asdict(r), sort_keys=True) + "\n" for r in records))
    tmp.replace(path)


def read_problems(path: Path) -> list[Problem]:
    return [Problem(**json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


def read_candidates(path: Path) -> list[Candidate]:
    return [Candidate(**json.loads(line)) for line in path.read_text().splitlines() if line.strip()]


def stage(folder: Path, problems: Sequence[Problem], candidates: Sequence[Candidate], config: EvalConfig,
          pools: Sequence[tuple[str, str, Sequence[str]]], kept: Path | None = None) -> None:
    """The torch-only inputs: ``inputs/*.jsonl`` once (the folder is keyed by their content) and one
    ``pool.json`` per (name, gpu_kind, devices). A pool without measurements starts from those kept under
    ``kept`` (``<kept>/<key>/<pool>/measurements.jsonl``, CrossGpuParams.kept)."""
    inputs = folder / "inputs"
    if not (inputs / "candidates.jsonl").is_file():
        write_jsonl(problems, inputs / "problems.jsonl")
        write_jsonl(candidates, inputs / "candidates.jsonl")
    protocol = protocol_section(config)
    for name, gpu_kind, devices in pools:
        path = folder / name / POOL_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"pool": name, "gpu_kind": gpu_kind, "devices": list(devices),
                                    "protocol": protocol}, indent=2) + "\n")
    restore_kept(folder, [name for name, _kind, _devices in pools], kept)


def restore_kept(folder: Path, pools: Sequence[str], kept: Path | None) -> None:
    """Each pool folder without measurements starts from those kept under ``kept``
    (``<kept>/<key>/<pool>/measurements.jsonl``, CrossGpuParams.kept)."""
    for name in pools:
        saved = kept / folder.name / name / MEASUREMENTS if kept is not None else None
        if saved is not None and saved.is_file() and not (folder / name / MEASUREMENTS).exists():
            (folder / name).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(saved, folder / name / MEASUREMENTS)


def protocol_section(config: EvalConfig) -> dict[str, Any]:
    """The protocol as a pool reads it: plain lists (YAML- and JSON-safe), the device set per pool."""
    protocol = json.loads(json.dumps(config.to_dict()))
    protocol.pop("device", None)
    return protocol


def pool_config(spec: dict[str, Any]) -> EvalConfig:
    from cudal1.typed_params import build

    return build(EvalConfig, spec["protocol"], f"{spec.get('pool', 'pool')}.protocol")


def run_pool(pool_dir: str | Path, devices: Sequence[str] | None = None,
             progress: Callable[[Evaluation], None] | None = None, ahead: int | None = None,
             measurements: str | Path | None = None) -> list[Evaluation]:
    """Evaluate the pool's inputs on ``devices`` (default: pool.json's) and write its completed result.
    ``ahead``: candidates a device loads ahead of the one it times (default: the evaluator's).
    ``measurements``: the file each evaluation is appended to (default ``<pool_dir>/measurements.jsonl``),
    e.g. one the repository keeps (the reproduction pipeline's measuring stages)."""
    from cudal1.evaluator import evaluate_many
    from cudal1.evaluator.batch import AHEAD
    from cudal1.generation.augment import select_measured

    pool_dir = Path(pool_dir)
    spec_path = pool_dir / POOL_FILE
    if not spec_path.is_file():
        raise FileNotFoundError(f"{spec_path}: no pool file; stage the run first with "
                                "`python -m flows.cross_gpu --stage` (it writes <storage>/<key>/<pool>/pool.json)")
    spec = json.loads(spec_path.read_text())
    inputs = pool_dir.parent / "inputs"
    problems, candidates = read_problems(inputs / "problems.jsonl"), read_candidates(inputs / "candidates.jsonl")
    devices = list(devices or spec["devices"])
    config = pool_config(spec).with_device(devices[0])
    kind = spec.get("gpu_kind", "")
    check_devices(kind, devices)
    measurements = Path(measurements) if measurements is not None else pool_dir / MEASUREMENTS
    measurements.parent.mkdir(parents=True, exist_ok=True)
    moved = set_aside(measurements, kind)
    if moved:
        print(f"{moved} measurements made on hardware other than {kind} moved to {measurements.with_name(ELSEWHERE)}; "
              "their candidates are measured again", file=sys.stderr)
    unique = list({(c.problem_id, c.sha256): c for c in candidates}.values())
    evaluate_many(problems, unique, config, devices=devices, results_path=measurements, progress=progress,
                  ahead=AHEAD if ahead is None else ahead)
    evaluations = select_measured(load_evaluations(measurements), problems, candidates, config, devices)
    if len(evaluations) == len(candidates):
        save_evaluations(evaluations, pool_dir / COMPLETED)
    return evaluations


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("pool_dir", type=Path, help="<storage>/<key>/<pool>, as staged by the cross_gpu flow")
    ap.add_argument("--devices", default="", help="comma-separated, e.g. cuda:0,cuda:1 (default: pool.json's)")
    ap.add_argument("--ahead", type=int, default=None,
                    help="candidates a device loads ahead of the one it times (default 3: a reproduction row)")
    ap.add_argument("--measurements", type=Path, default=None,
                    help="the file evaluations are appended to (default: <pool_dir>/measurements.jsonl)")
    args = ap.parse_args(argv)
    started, done = time.perf_counter(), [0]

    def progress(e: Evaluation) -> None:
        done[0] += 1
        speed = "-" if e.speedup is None else f"{e.speedup:.2f}x"
        print(f"[{done[0]} {time.perf_counter() - started:7.1f}s] {e.problem_id:8s} {e.candidate_id} "
              f"{e.status.value:13s} {speed:>8s} {e.reason[:80]}", flush=True)

    try:
        evaluations = run_pool(args.pool_dir, [d for d in args.devices.split(",") if d] or None, progress, args.ahead,
                               args.measurements)
    except (FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    complete = (args.pool_dir / COMPLETED).is_file()
    print(json.dumps({"pool": args.pool_dir.name, "evaluations": len(evaluations), "complete": complete,
                      "wall_s": round(time.perf_counter() - started, 1)}))


if __name__ == "__main__":
    main()
