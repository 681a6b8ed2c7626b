"""The CUDA-L1 reproduction as the stages of its own DVC pipeline (reproduction/dvc.yaml), each run from the
repository root:

    python -m cudal1.reproduce prepare --params reproduction.yaml --pools reproduction/pools
    python -m cudal1.reproduce measure reproduction/pools/gpu-h100 [--devices cuda:0,cuda:1] [--release PATH]
    python -m cudal1.reproduce gather reproduction/pools/gpu-h100 reproduction/pools/gpu-h200 --out G
    python -m cudal1.reproduce report --params reproduction.yaml --gathered G

``prepare`` fixes what each pool measures (``<pool>/inputs.json``: its GPU kind and devices, the release by
name and sha256, the baseline columns, the protocol and the inputs' key). ``measure`` evaluates that on a GPU
of the pool's kind, appending every evaluation to ``<pool>/measurements.jsonl``, which the repository keeps
(a stopped run resumes from it; an earlier protocol's measurements go to ``measurements-earlier.jsonl``).
``gather`` decides which protocol's measurements each pool's figures come from and whether the pool is
complete (``gathered.json``). ``report`` writes the page, its CSV and JSON and
one per-row CSV per GPU kind. Torch and this package only: a GPU host needs no DVC to run ``measure``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from cudal1.candidates import Candidate
from cudal1.config import CrossGpuParams, load_params
from cudal1.cross_gpu import (
    PoolResult,
    Reproduction,
    gather_pool,
    partial_evaluations,
    protocols_measured,
    reproduction,
    storage_key,
    table_rows,
    write_tables,
)
from cudal1.cross_gpu_pool import MEASUREMENTS, move_rows, pool_config, protocol_section, stage
from cudal1.data_sources import DataFileError, declared_name, file_sha256
from cudal1.evaluator.config import EvalConfig
from cudal1.gpu_gaps import gaps
from cudal1.problems import Problem, ReleasedKernel, load_cudal1_release
from cudal1.reproduction import release_inputs, reported_aggregates, row_table

DVC_FILE = "reproduction/dvc.yaml"
INPUTS = "inputs.json"  # what a pool measures, written by prepare
# Earlier protocols' measurements, set aside by measure; gather and report still read them (the protocol a
# pool's figures come from until the current one is complete, and the rows that moved between the two)
EARLIER = "measurements-earlier.jsonl"
REPORT_COMMAND = f"dvc repro {DVC_FILE}"


def measure_command(pool: str) -> str:
    """What re-measures a pool on a host of its GPU kind (docs/guides/reproduction.md)."""
    stage_name = f"{DVC_FILE}:measure-{pool}"
    return f"dvc unfreeze {stage_name} && dvc repro --force {stage_name}"


def prepare(params: CrossGpuParams, pools_dir: Path) -> list[Path]:
    """One ``<pools_dir>/<pool>/inputs.json`` per pool of ``params``; the release must be a declared data file
    (cudal1/data_sources.json), so that its checksum is the one everybody measures."""
    if not params.release or declared_name(params.release) is None:
        raise DataFileError(f"cross_gpu.release: {params.release}: the reproduction measures a declared data file "
                            "(e.g. ../shared/cuda-l1/h100.jsonl; cudal1/data_sources.json, docs/data.md)")
    path = os.path.relpath(params.release)  # as the stages name it, from the repository root
    release = load_cudal1_release(path)
    problems, candidates = release_inputs(release, params.baselines)
    shared = {"release": {"path": path, "name": declared_name(path), "sha256": file_sha256(path)},
              "baselines": list(params.baselines), "problems": len(problems), "candidates": len(candidates),
              "key": storage_key(problems, candidates, params.protocol), "storage": os.path.relpath(params.storage),
              "config_hash": params.protocol.hash, "protocol": protocol_section(params.protocol)}
    written = []
    for pool in params.pools:
        path = pools_dir / pool.name / INPUTS
        path.parent.mkdir(parents=True, exist_ok=True)
        spec = {"pool": pool.name, "gpu_kind": pool.gpu_kind, "devices": list(pool.devices), **shared}
        path.write_text(json.dumps(spec, indent=1) + "\n")
        written.append(path)
    return written


def read_spec(pool_dir: Path) -> dict[str, Any]:
    path = pool_dir / INPUTS
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no pool inputs; write them with `dvc repro {DVC_FILE}:prepare`")
    return json.loads(path.read_text())


def spec_inputs(spec: dict[str, Any], release_path: str | Path | None = None
                ) -> tuple[list[Problem], list[Candidate], list[ReleasedKernel]]:
    """The problems and candidates a pool measures, rebuilt from the release file (the one prepare read, or
    ``release_path``: the same file elsewhere) and checked against what prepare recorded."""
    path = Path(release_path or spec["release"]["path"])
    release = load_cudal1_release(path)  # a file at a declared name is checked against the manifest here
    if file_sha256(path) != spec["release"]["sha256"]:
        raise DataFileError(f"{path}: not the release the pools were prepared from ({spec['release']['name']}, "
                            f"sha256 {spec['release']['sha256'][:16]}...); `cudal1 data fetch` gets it (docs/data.md)")
    problems, candidates = release_inputs(release, spec["baselines"])
    if storage_key(problems, candidates, pool_config(spec)) != spec["key"]:
        raise ValueError(f"pool {spec['pool']}: its inputs were prepared by other code or another protocol; "
                         f"prepare them again with `dvc repro {DVC_FILE}:prepare`")
    return problems, candidates, release


def set_earlier_aside(pool_dir: Path, config_hash: str) -> int:
    """Move the measurements of protocols other than ``config_hash`` from ``<pool>/measurements.jsonl`` to the
    end of ``<pool>/measurements-earlier.jsonl`` (cross_gpu_pool.move_rows), so that the file the runner
    appends to holds the current protocol's alone (cross_gpu reads every ``measurements*.jsonl`` of a pool;
    one file holding every protocol's rows passed 2 MB). Returns how many moved."""
    return move_rows(pool_dir / MEASUREMENTS, EARLIER, lambda row: row.get("config_hash") == config_hash)


def measure(pool_dir: Path, devices: Sequence[str] = (), release_path: str | None = None,
            ahead: int | None = None) -> None:
    """Stage the pool's inputs for the pool runner (``<storage>/<key>``, the cross-GPU flow's layout) and run it,
    appending to the measurements kept in ``pool_dir`` (those of an earlier protocol set aside first)."""
    from cudal1.cross_gpu_pool import main as run_pool_main

    spec = read_spec(pool_dir)
    problems, candidates, _ = spec_inputs(spec, release_path)
    if moved := set_earlier_aside(pool_dir, spec["config_hash"]):
        print(f"{pool_dir / MEASUREMENTS}: {moved} measurements of earlier protocols moved to {pool_dir / EARLIER}")
    scratch = Path(spec["storage"]) / spec["key"]
    stage(scratch, problems, candidates, pool_config(spec), [(spec["pool"], spec["gpu_kind"], spec["devices"])])
    run_pool_main([str(scratch / spec["pool"]), "--measurements", str(pool_dir / MEASUREMENTS),
                   *(["--devices", ",".join(devices)] if devices else []),
                   *(["--ahead", str(ahead)] if ahead is not None else [])])


def chosen_protocol(covered: dict[str, int], total: int, current: str) -> str | None:
    """The protocol a pool's figures come from: the current one once it covers every candidate; else one that
    does (the last measured: kept measurements of an earlier protocol, while a new one is measured); else the
    current one where it has measurements; else the one covering most.

    >>> chosen_protocol({"old": 840, "new": 600}, 840, "new"), chosen_protocol({"old": 840, "new": 840}, 840, "new")
    ('old', 'new')
    >>> chosen_protocol({"old": 300, "new": 20}, 840, "new"), chosen_protocol({}, 840, "new")
    ('new', None)
    """
    complete = [h for h, n in covered.items() if n == total]
    if current in complete:
        return current
    if complete:
        return complete[-1]
    if current in covered:
        return current
    return max(covered, key=lambda h: covered[h], default=None)


def gather(pool_dirs: Sequence[Path]) -> dict[str, Any]:
    """Per pool, in the order given: its status, the protocol its figures come from, how many evaluations."""
    specs = [read_spec(d) for d in pool_dirs]
    if len({s["key"] for s in specs}) != 1:
        raise ValueError(f"the pools were prepared from different inputs; run `dvc repro {DVC_FILE}:prepare`")
    _problems, candidates, _release = spec_inputs(specs[0])
    pools = []
    for folder, spec in zip(pool_dirs, specs):
        config = pool_config(spec)
        covered = protocols_measured(folder, candidates, spec["gpu_kind"])
        chosen = chosen_protocol(covered, len(candidates), config.hash)
        result = gather_pool(folder, spec["pool"], spec["gpu_kind"], config, candidates, config_hash=chosen)
        rest = f"measure the rest on a host with {spec['gpu_kind']} GPUs: `{measure_command(spec['pool'])}`"
        if not result.completed:
            message = f"{len(result.evaluations)} of {len(candidates)} candidates measured; {rest}"
        elif chosen != config.hash:  # a reader must see which figures are not the current ones
            message = (f"figures of an earlier protocol ({chosen}): {covered.get(config.hash, 0)} of "
                       f"{len(candidates)} candidates measured under the current one so far; {rest}")
        else:
            message = ""
        pools.append({"pool": spec["pool"], "folder": os.path.relpath(folder), "gpu_kind": spec["gpu_kind"],
                      "status": result.status, "measured_under": chosen, "evaluations": len(result.evaluations),
                      "candidates": len(candidates), "message": message})
    return {"key": specs[0]["key"], "config_hash": specs[0]["config_hash"], "pools": pools}


def protocol_note(gathered: dict[str, Any]) -> str:
    """The title's word on the protocols the figures were measured under."""
    current = gathered["config_hash"]
    measured = [p for p in gathered["pools"] if p["measured_under"]]
    hashes = {p["measured_under"] for p in measured}
    if len(hashes) > 1:
        each = ", ".join(f"{p['gpu_kind']} {p['measured_under']}" for p in measured)
        return f" (config hashes: {each}; the current protocol's is {current})"
    if hashes == {current}:
        return f" (config hash {current}, the current protocol)"
    return f" (measured under an earlier protocol, config hash {hashes.pop()})" if hashes else ""


def protocol_moves(gathered: dict[str, Any], config: EvalConfig, problems: Sequence[Problem],
                   candidates: Sequence[Candidate], rep: Reproduction) -> list[tuple[str, str, list[dict[str, Any]]]]:
    """Per pool whose figures are the current protocol's and which also keeps a complete earlier one (the
    table it replaces): the rows whose speedup moved by more than 25% between the two, or whose verdict
    changed, each with the reason the two rows show. Labels are the pool's GPU kind and each config hash."""
    current, moves = gathered["config_hash"], []
    for p in gathered["pools"]:
        if p["measured_under"] != current or p["pool"] not in rep.rows:
            continue
        folder, kind = Path(p["folder"]), p["gpu_kind"]
        covered = protocols_measured(folder, candidates, kind)
        earlier = [h for h, n in covered.items() if n == len(candidates) and h != current]
        if earlier:  # the last complete one before the current: the table the current one replaces
            old = row_table(problems, candidates, partial_evaluations(folder, config, candidates, kind, earlier[-1]))
            a, b = f"{kind} ({earlier[-1][:8]})", f"{kind} ({current[:8]})"
            moves.append((a, b, gaps(old, rep.rows[p["pool"]], a, b, same_gpu=True)))
    return moves


def report(params: CrossGpuParams, gathered: dict[str, Any]) -> dict[str, Path]:
    """The cross-GPU page, its CSV and JSON, and a per-row CSV per GPU kind, from the gathered pools."""
    spec = read_spec(Path(gathered["pools"][0]["folder"]))
    problems, candidates, release = spec_inputs(spec)
    config = pool_config(spec)
    results = []
    for p in gathered["pools"]:
        evaluations = partial_evaluations(Path(p["folder"]), config, candidates, p["gpu_kind"],
                                          p["measured_under"]) if p["measured_under"] else []
        results.append(PoolResult(p["pool"], p["gpu_kind"], p["status"], p["message"], tuple(evaluations)))
    rows = table_rows(results, problems, params.threshold, candidates)
    rep = reproduction(results, problems, candidates, params.threshold)
    rep = replace(rep, stats=[*rep.stats, ("reported (release)", reported_aggregates(release, params.threshold))],
                  moved=[*rep.moved, *protocol_moves(gathered, config, problems, candidates, rep)])
    title = f"Cross-GPU: {Path(spec['release']['path']).name}, {len(problems)} problems{protocol_note(gathered)}"
    return write_tables(rows, params.out_dir, title, params.threshold, rep, params.report_name, REPORT_COMMAND)


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    steps = ap.add_subparsers(dest="step", required=True)
    one = steps.add_parser("prepare", help="write each pool's inputs.json")
    one.add_argument("--params", default="reproduction.yaml")
    one.add_argument("--pools", type=Path, required=True, help="the folder of the pools' folders")
    one = steps.add_parser("measure", help="evaluate one pool here, on GPUs of its kind (resumable)")
    one.add_argument("pool_dir", type=Path)
    one.add_argument("--devices", default="", help="comma-separated, e.g. cuda:0,cuda:1 (default: the pool's)")
    one.add_argument("--release", default=None, help="the release file, where it is not at the prepared path")
    one.add_argument("--ahead", type=int, default=None, help="candidates a device loads ahead (the runner's)")
    one = steps.add_parser("gather", help="write which measurements each pool's figures come from")
    one.add_argument("pool_dirs", type=Path, nargs="+")
    one.add_argument("--out", type=Path, required=True)
    one = steps.add_parser("report", help="write the cross-GPU page and its tables")
    one.add_argument("--params", default="reproduction.yaml")
    one.add_argument("--gathered", type=Path, required=True)
    return ap.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    from cudal1.problems import ProblemLoadError
    from cudal1.typed_params import ParamsError

    args = _arguments(argv)
    try:
        if args.step == "prepare":
            for path in prepare(load_params(args.params, "cross_gpu"), args.pools):
                print(f"{path}: written")
        elif args.step == "measure":
            measure(args.pool_dir, [d for d in args.devices.split(",") if d], args.release, args.ahead)
        elif args.step == "gather":
            gathered = gather(args.pool_dirs)
            args.out.write_text(json.dumps(gathered, indent=1) + "\n")
            for p in gathered["pools"]:
                print(f"{p['pool']} ({p['gpu_kind']}): {p['status']}, {p['evaluations']} of {p['candidates']} "
                      f"under config hash {p['measured_under']}")
        else:
            written = report(load_params(args.params, "cross_gpu"), json.loads(args.gathered.read_text()))
            print("\n".join(f"{os.path.relpath(path)}: written" for path in written.values()))
    except (DataFileError, ProblemLoadError, ParamsError, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
