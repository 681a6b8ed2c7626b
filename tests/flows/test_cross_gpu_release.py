"""The reproduction path of `python -m flows.cross_gpu` on this CPU, as it runs across GPU machines that
have no Prefect worker: a CUDA-L1-format release file (written here from starter problems: two rows with a
program, one without) with a baseline column, `--stage` into the storage, one pool evaluated by the
torch-only runner and the other by the flow's `--local --pool`, then `--gather` into the table with the
baseline columns, every row (the one without a program as `no_program`) and the release's reported
aggregates."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import pytest
from pipeline_helpers import copy_repo, edit_params, run

pytestmark = pytest.mark.slow  # three flow runs and two pools of 2 programs + 2 baselines: about a minute

POOLS = [{"name": "gpu-h100", "gpu_kind": "H100", "devices": "cpu"},
         {"name": "gpu-h200", "gpu_kind": "H200", "devices": "cpu"}]
PROTOCOL = {"correctness_trials": 2, "timing_trials": 3, "target_trial_ms": 5.0, "warmup_iters": 1, "remeasure": 0}


def _release(path: Path) -> list[str]:
    """Three rows in the release's format: the reference, a program (or none) and reported scores."""
    from cudal1.generation.templates import template_source
    from cudal1.problems import load_starter_suite

    problems = load_starter_suite()[:3]
    lines = []
    for i, p in enumerate(problems):
        level, number = (int(x) for x in p.problem_id.removeprefix("starter-L").split("-"))
        program = template_source(p, "inference_mode") if i < 2 else None
        lines.append(json.dumps({"level_id": level, "task_id": number, "ref_code": p.source, "custom_code": program,
                                 "score_default": 1.5 + i, "score_torch_compile_default": 1.2,
                                 "score_torch_compile_reduce_overhead": None, "score_cuda_graph": 1.1,
                                 "score_cudnn": None}) + "\n")
    path.write_text("".join(lines))
    return [f"L{level}-{number}" for level, number in
            ((int(x) for x in p.problem_id.removeprefix("starter-L").split("-")) for p in problems)]


def test_release_through_stage_pool_runner_local_pool_and_gather(tmp_path: Path, run_env: dict[str, str]) -> None:
    repo = copy_repo(tmp_path / "repo")
    ids = _release(repo / "release.jsonl")
    edit_params(repo, {"cross_gpu": {"pools": POOLS, "release": "release.jsonl", "baselines": ["cuda_graph"],
                                     "protocol": PROTOCOL}})
    flow = [sys.executable, "-m", "flows.cross_gpu"]

    staged = run([*flow, "--stage"], repo, run_env)
    assert staged.returncode == 0, staged.stdout[-3000:] + staged.stderr[-3000:]
    [folder] = list((repo / "data/cross_gpu").iterdir())
    assert {p.name for p in folder.iterdir()} == {"inputs", "gpu-h100", "gpu-h200"}
    assert "python -m cudal1.cross_gpu_pool" in staged.stdout + staged.stderr

    runner = subprocess.run([sys.executable, "-m", "cudal1.cross_gpu_pool", str(folder / "gpu-h100")], cwd=repo,
                            env=run_env | {"PYTHONPATH": str(repo)}, capture_output=True, text=True, timeout=600)
    assert runner.returncode == 0, runner.stdout[-3000:] + runner.stderr[-3000:]
    local = run([*flow, "--local", "--pool", "gpu-h200"], repo, run_env)
    assert local.returncode == 0, local.stdout[-3000:] + local.stderr[-3000:]
    assert (folder / "gpu-h200" / "evaluations.jsonl").is_file()
    unknown = run([*flow, "--local", "--pool", "gpu-x"], repo, run_env)
    assert unknown.returncode == 2 and "no pool named 'gpu-x'" in unknown.stderr

    gathered = run([*flow, "--gather"], repo, run_env)
    assert gathered.returncode == 0, gathered.stdout[-3000:] + gathered.stderr[-3000:]
    out = repo / "reports/cross_gpu"
    table = {row["gpu"]: row for row in json.loads((out / "cross_gpu.json").read_text())["gpus"]}
    assert table["H100"]["status"] == table["H200"]["status"] == "completed"
    assert table["H100"]["total"] == 3 and table["H100"]["evaluations"] == 4  # 2 programs + 2 baselines
    rows = []
    for kind in ("H100", "H200"):  # one per-row table per GPU, a row per problem
        with (out / f"cross_gpu-rows-{kind}.csv").open() as f:
            table = list(csv.DictReader(f))
        assert [r["problem_id"] for r in table] == ids and {r["gpu"] for r in table} == {kind}
        rows += table
    assert {r["status"] for r in rows if r["problem_id"] == ids[2]} == {"no_program"}
    assert all(r["vs_cuda_graph"] for r in rows if r["status"] == "ok")
    markdown = (out / "cross_gpu.md").read_text()
    assert "regenerate it with `python -m flows.cross_gpu --params params.yaml --gather`" in markdown
    assert "**vs CUDA graphs**" in markdown and "| reported (release) | reported | 2.00 |" in markdown
    assert "## Rows whose H100 and H200 speedups differ by more than 25%" in markdown

    # A fresh clone has the pools' measurements kept in the repository and no storage: --gather starts
    # each pool from them (cross_gpu.kept) and makes the same table.
    import shutil

    kept = repo / "kept"
    for pool in ("gpu-h100", "gpu-h200"):
        (kept / folder.name / pool).mkdir(parents=True)
        shutil.copyfile(folder / pool / "measurements.jsonl", kept / folder.name / pool / "measurements.jsonl")
    before = json.loads((out / "cross_gpu.json").read_text())["gpus"]
    shutil.rmtree(repo / "data/cross_gpu")
    edit_params(repo, {"cross_gpu": {"kept": "kept"}})
    again = run([*flow, "--gather"], repo, run_env)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    assert json.loads((out / "cross_gpu.json").read_text())["gpus"] == before

    # The evaluator's settings change (a new key for the same inputs): --gather finds nothing measured
    # under them and refuses to replace the report with an empty table, naming the kept key; --key
    # gathers that key's measurements as they were made, with the protocol they were made under.
    report = (out / "cross_gpu.md").read_text()
    shutil.rmtree(repo / "data/cross_gpu")
    edit_params(repo, {"cross_gpu": {"protocol": PROTOCOL | {"timing_trials": 4}}})
    refused = run([*flow, "--gather"], repo, run_env)
    assert refused.returncode == 2 and f"--gather --key {folder.name}" in refused.stderr, refused.stderr[-2000:]
    assert "made under another protocol" in refused.stderr and (out / "cross_gpu.md").read_text() == report
    unknown = run([*flow, "--gather", "--key", "000000000000"], repo, run_env)
    assert unknown.returncode == 2 and f"keys kept under kept: {folder.name}" in unknown.stderr, unknown.stderr[-2000:]
    misplaced = run([*flow, "--local", "--key", folder.name], repo, run_env)
    assert misplaced.returncode == 2 and "--key goes with --gather" in misplaced.stderr
    kept_key = run([*flow, "--gather", "--key", folder.name], repo, run_env)
    assert kept_key.returncode == 0, kept_key.stdout[-3000:] + kept_key.stderr[-3000:]
    assert json.loads((out / "cross_gpu.json").read_text())["gpus"] == before
    markdown = (out / "cross_gpu.md").read_text()
    assert f"--gather --key {folder.name}`" in markdown and "measured under an earlier protocol, config hash" in markdown
    assert not (repo / "data/cross_gpu" / folder.name / "gpu-h100" / "pool.json").exists()  # nothing staged
