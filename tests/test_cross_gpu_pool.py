"""A cross-GPU run through the storage, without Prefect: the inputs staged, each pool evaluated by the
torch-only pool runner in its own process (as on a GPU host that has no worker), one pool killed half-way
and resumed, then the table with CUDA-L1's baseline columns made from what the pools wrote. Two pools
stand in for GPU kinds on this CPU; the baselines are torch.compile's rewrite, the CUDA-graph rewrite (it
runs the eager forward where there is no CUDA) and one baseline that fails, whose column stays empty."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cudal1.candidates import Candidate, Evaluation, Status, load_evaluations, save_evaluations
from cudal1.cross_gpu import gather_pool, reproduction, table_rows, write_tables
from cudal1.cross_gpu_pool import COMPLETED, MEASUREMENTS, read_candidates, stage
from cudal1.evaluator import EvalConfig
from cudal1.generation.templates import template_candidates
from cudal1.problems import load_starter_suite
from cudal1.reproduction import baseline_candidates, baseline_origin

REPO = Path(__file__).resolve().parents[1]
CONFIG = EvalConfig(correctness_trials=2, timing_trials=3, target_trial_ms=5.0, warmup_iters=1, remeasure=0)
pytestmark = pytest.mark.slow  # three processes evaluate 4-8 candidates each, one torch.compile build


def _pool_runner(pool_dir: Path, *options: str) -> subprocess.CompletedProcess[str]:
    """The runner as a GPU host runs it; it must not import what those hosts lack."""
    code = ("import sys; from cudal1.cross_gpu_pool import main; main(sys.argv[1:]); "
            "heavy = {'polars', 'prefect', 'mlflow', 'dvc', 'transformers', 'trl'} & {m.split('.')[0] for m in sys.modules}; "
            "assert not heavy, heavy")
    return subprocess.run([sys.executable, "-c", code, str(pool_dir), *options], capture_output=True, text=True, timeout=600,
                          env=os.environ | {"PYTHONPATH": str(REPO)})


def test_pools_without_workers_meet_in_the_storage_and_fill_the_baseline_columns(tmp_path: Path) -> None:
    problems = load_starter_suite()[:2]
    programs = [c for p in problems for c in template_candidates(p, ["inference_mode"])]
    baselines = baseline_candidates(problems[:1], ["compile-default"]) + baseline_candidates(problems, ["cuda_graph"])
    broken = Candidate(problems[1].problem_id, "raise RuntimeError('no such baseline')\n",
                       origin=baseline_origin("compile-reduce-overhead"))
    baselines.append(broken)
    candidates = programs + baselines
    folder = tmp_path / "storage" / "key"
    stage(folder, problems, candidates, CONFIG, [("gpu-a", "A", ["cpu"]), ("gpu-b", "B", ["cpu"])])
    assert len(read_candidates(folder / "inputs" / "candidates.jsonl")) == len(candidates)

    first = _pool_runner(folder / "gpu-a")
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    assert json.loads(first.stdout.splitlines()[-1])["complete"] is True
    a = load_evaluations(folder / "gpu-a" / COMPLETED)
    assert len(a) == len(candidates)

    # Pool b's host died after two evaluations: gathered as partial, then resumed by a second run.
    save_evaluations(load_evaluations(folder / "gpu-a" / MEASUREMENTS)[:2], folder / "gpu-b" / MEASUREMENTS)
    partial = gather_pool(folder / "gpu-b", "gpu-b", "B", CONFIG, candidates)
    assert partial.status == "partial" and len(partial.evaluations) == 2 and "cross_gpu_pool" in partial.message
    second = _pool_runner(folder / "gpu-b", "--ahead", "1")  # one candidate loaded ahead: same results
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
    measured = [line for line in second.stdout.splitlines() if line.startswith("[")]
    assert len(measured) == len(candidates) - 2  # only the rest

    results = [gather_pool(folder / name, name, kind, CONFIG, candidates) for name, kind in (("gpu-a", "A"), ("gpu-b", "B"))]
    assert [r.status for r in results] == ["completed", "completed"]
    rows = table_rows(results, problems, 1.01, candidates)
    assert [r["success"] for r in rows] == [2, 2]  # the programs; the baselines are yardsticks, not solutions
    rep = reproduction(results, problems, candidates, 1.01)
    by_id = {r["problem_id"]: r for r in rep.rows["gpu-a"]}
    one, two = problems[0].problem_id, problems[1].problem_id
    compiled = next(e for e in a if e.candidate_id == baselines[0].candidate_id)
    assert compiled.status is Status.OK, compiled.reason  # torch.compile's rewrite passes the evaluator
    assert by_id[one]["compile_default_status"] == "ok" and by_id[one]["vs_compile_default"] is not None
    assert by_id[two]["compile_default_status"] == "" and by_id[two]["vs_compile_default"] is None
    assert {by_id[p]["cuda_graph_status"] for p in (one, two)} == {"ok"} and by_id[two]["vs_cuda_graph"] is not None
    assert by_id[two]["compile_reduce_overhead_status"] not in ("", "ok")
    assert by_id[two]["vs_compile_reduce_overhead"] is None and by_id[two]["vs_eager"] is not None
    program = next(e for e in a if e.problem_id == one and e.candidate_id == programs[0].candidate_id)
    expected = program.speedup / compiled.speedup
    assert by_id[one]["vs_compile_default"] == pytest.approx(expected)
    assert by_id[one]["vs_compile_default_low"] <= expected <= by_id[one]["vs_compile_default_high"]
    assert by_id[one]["strict_status"] in ("ok", "incorrect")  # decided from the recorded error, not 'unknown'
    stats = {(s["column"], s["tolerance"]): s for s in dict(rep.stats)["A"]}
    assert stats[("eager", "1e-2")]["success"] == 2 and stats[("compile-default", "1e-2")]["success"] == 1
    assert stats[("cuda_graph", "1e-2")]["success"] == 2 and stats[("compile-reduce-overhead", "1e-2")]["success"] == 0

    written = write_tables(rows, tmp_path / "out", "test", 1.01, rep, name="cross-gpu", command="make it")
    assert written["markdown"].name == "cross-gpu.md"
    text = written["markdown"].read_text()
    assert "regenerate it with `make it`" in text
    assert rows[0]["device_names"] and f"| A | {rows[0]['device_names']} |" in text  # as torch names the device
    assert "**vs torch.compile (default)**" in text and "**vs CUDA graphs**" in text
    assert "## Rows whose A and B speedups differ by more than 25%" in text
    for pool, kind in (("gpu-a", "A"), ("gpu-b", "B")):
        table = written[f"rows:{pool}"].read_text().splitlines()
        assert written[f"rows:{pool}"].name == f"cross-gpu-rows-{kind}.csv"
        assert len(table) == 1 + len(problems) and table[0].startswith("gpu,problem_id,level,status")
        assert {"vs_eager", "vs_compile_default", "vs_compile_reduce_overhead", "vs_cuda_graph"} <= set(table[0].split(","))
    document = json.loads(written["json"].read_text())
    assert {b["gpu"] for b in document["baselines"]} == {"A", "B"} and document["moved"][0]["gpus"] == ["A", "B"]


def test_report_name_is_a_file_stem() -> None:
    """The report's files go in out_dir; a report_name with a folder in it is refused with the fix."""
    from cudal1.config import CrossGpuParams

    assert CrossGpuParams(report_name="cross-gpu").report_name == "cross-gpu"
    with pytest.raises(ValueError, match="report_name 'docs/x'.*the folder goes in out_dir"):
        CrossGpuParams(report_name="docs/x")


@pytest.mark.parametrize(("kind", "name", "match"), [
    ("H100", "NVIDIA H100 80GB HBM3", True), ("H200", "NVIDIA H200", True), ("H20", "NVIDIA H200", False),
    ("H200", "NVIDIA H100 80GB HBM3", False), ("A100", "NVIDIA A100-SXM4-80GB", True),
    ("3090", "NVIDIA GeForce RTX 3090", True), ("L40", "NVIDIA L40S", False), ("h100", "NVIDIA H100 PCIe", True)])
def test_a_gpu_kind_is_a_whole_word_of_the_device_name(kind: str, name: str, match: bool) -> None:
    from cudal1.cross_gpu_pool import names_kind

    assert names_kind(kind, name) is match


def test_a_pool_refuses_a_gpu_of_another_kind_and_sets_aside_what_one_measured(tmp_path: Path, monkeypatch) -> None:
    """A run of an H200 pool on an H100 measured 129 evaluations there before the check: the runner now
    refuses such a device, moves measurements made on another kind aside (kept, and measured again), and
    gathering leaves them out of the pool's table."""
    from cudal1.cross_gpu_pool import ELSEWHERE, check_devices, set_aside
    from cudal1.evaluator import workers

    monkeypatch.setattr(workers, "device_name", lambda device: "cpu")  # as it names a device with no GPU
    with pytest.raises(ValueError, match="cuda:0 is not available here"):
        check_devices("H200", ["cuda:0"])
    check_devices("H200", ["cpu"])  # a pool staged with cpu devices measures there
    monkeypatch.setattr(workers, "device_name", lambda device: "NVIDIA H100 80GB HBM3")
    with pytest.raises(ValueError, match=r"H200 GPUs, but cuda:0 is a NVIDIA H100 80GB HBM3: run it on a H200"):
        check_devices("H200", ["cuda:0"])
    check_devices("H100", ["cuda:0"])

    problems = load_starter_suite()[:1]
    candidates = template_candidates(problems[0], ["inference_mode", "no_grad"])
    pool = tmp_path / "gpu-h200"
    on = [Evaluation(problems[0].problem_id, c.candidate_id, Status.OK, speedup=1.1, device="cuda:0",
                     device_name=name, config_hash=CONFIG.hash, candidate_sha256=c.sha256)
          for c, name in zip(candidates, ["NVIDIA H200", "NVIDIA H100 80GB HBM3"], strict=True)]
    save_evaluations(on, pool / MEASUREMENTS)
    save_evaluations(on, pool / COMPLETED)
    gathered = gather_pool(pool, "gpu-h200", "H200", CONFIG, candidates)
    assert gathered.status == "partial" and [e.device_name for e in gathered.evaluations] == ["NVIDIA H200"]
    assert "1 evaluations were measured on NVIDIA H100 80GB HBM3, not a H200" in gathered.message
    assert set_aside(pool / MEASUREMENTS, "H200") == 1
    assert [e.device_name for e in load_evaluations(pool / MEASUREMENTS)] == ["NVIDIA H200"]
    assert [e.candidate_id for e in load_evaluations(pool / ELSEWHERE)] == [candidates[1].candidate_id]
    assert set_aside(pool / MEASUREMENTS, "H200") == 0


def test_a_pool_whose_every_candidate_is_measured_is_complete_without_its_table(tmp_path: Path) -> None:
    """The repository keeps a pool's measurements, not the table its runner writes at the end: a pool
    folder seeded from them (CrossGpuParams.kept) gathers as completed when every candidate has one, and
    as partial when some lack one."""
    problems = load_starter_suite()[:1]
    candidates = template_candidates(problems[0], ["inference_mode", "no_grad"])
    measured = [Evaluation(problems[0].problem_id, c.candidate_id, Status.OK, speedup=1.1, device="cuda:0",
                           device_name="NVIDIA H200", config_hash=CONFIG.hash, candidate_sha256=c.sha256)
                for c in candidates]
    pool = tmp_path / "gpu-h200"
    save_evaluations(measured[:1], pool / MEASUREMENTS)
    assert gather_pool(pool, "gpu-h200", "H200", CONFIG, candidates).status == "partial"
    save_evaluations(measured, pool / MEASUREMENTS)
    gathered = gather_pool(pool, "gpu-h200", "H200", CONFIG, candidates)
    assert gathered.status == "completed" and len(gathered.evaluations) == 2 and not (pool / COMPLETED).exists()
