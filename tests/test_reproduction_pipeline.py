"""The reproduction's DVC pipeline (reproduction/dvc.yaml, cudal1/reproduce.py): on a fresh copy with no GPU,
`dvc repro` writes the committed report and results files again byte for byte from the kept measurements and
`dvc status` is clean after it; a changed release file stops it; the measuring stages stay frozen and
unfreezing one changes one line; gather keeps the figures on an earlier protocol until the current one has
measured every candidate."""

from __future__ import annotations

import difflib
import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from cudal1.candidates import load_evaluations, save_evaluations
from cudal1.cross_gpu_pool import MEASUREMENTS
from cudal1.data_sources import DataFileError
from cudal1.reproduce import EARLIER as EARLIER_FILE
from cudal1.reproduce import gather, measure_command, protocol_note, read_spec, set_earlier_aside, spec_inputs

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
RELEASE = SHARED / "cuda-l1" / "h100.jsonl"
DVC_FILE = "reproduction/dvc.yaml"
POOLS = ROOT / "reproduction" / "pools"
EARLIER = "c7efd958dff6c398"  # the protocol both kept pools were measured under completely
ENV = os.environ | {"DVC_NO_ANALYTICS": "1", "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
needs_release = pytest.mark.skipif(not RELEASE.is_file(), reason="../shared/cuda-l1/h100.jsonl is not here")


def dvc(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dvc", *args], cwd=repo, env=ENV, capture_output=True, text=True,
                          timeout=600)


def stages() -> dict[str, dict]:
    return yaml.safe_load((ROOT / DVC_FILE).read_text())["stages"]


def outputs() -> list[str]:
    """Every output of the pipeline but the measurements (which only a GPU host writes)."""
    return [next(iter(out)) if isinstance(out, dict) else out for name, stage in stages().items()
            if not name.startswith("measure-") for out in stage["outs"]]


def fresh_copy(dest: Path) -> Path:
    """What a clone holds (tracked files and untracked ones git does not ignore) as its own git repository,
    with ../shared beside it as the data folder."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    repo = dest / "repo"
    for rel in filter(None, listed):
        if (ROOT / rel).is_file():
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, repo / rel)
    (dest / "shared").symlink_to(SHARED)
    git = ["git", "-c", "user.name=cudal1-tests", "-c", "user.email=tests@cudal1.invalid"]
    for cmd in ([*git, "init", "-q"], [*git, "add", "-A"], [*git, "commit", "-qm", "copy"]):
        subprocess.run(cmd, cwd=repo, check=True)
    return repo


def test_every_output_is_kept_by_git_and_the_measuring_stages_are_frozen() -> None:
    """cache: false everywhere, so a clone has every output and `dvc status` needs no DVC remote; the
    measurements persist, so DVC never deletes them before a (resumed) measuring run."""
    for name, stage in stages().items():
        assert stage["wdir"] == ".." and all(next(iter(out.values()))["cache"] is False for out in stage["outs"])
        if name.startswith("measure-"):
            pool = name.removeprefix("measure-")
            assert stage["frozen"] is True and stage["cmd"] == f"python -m cudal1.reproduce measure reproduction/pools/{pool}"
            assert stage["outs"] == [{f"reproduction/pools/{pool}/{name}": {"cache": False, "persist": True}}
                                     for name in (EARLIER_FILE, MEASUREMENTS)]
            assert stage["deps"] == [f"reproduction/pools/{pool}/inputs.json"]
            assert measure_command(pool) == f"dvc unfreeze {DVC_FILE}:{name} && dvc repro --force {DVC_FILE}:{name}"
    assert {"prepare", "measure-gpu-h100", "measure-gpu-h200", "gather", "report"} <= set(stages())


def test_unfreezing_a_measuring_stage_changes_one_line(tmp_path: Path) -> None:
    """reproduction/dvc.yaml is kept as DVC writes it, so `dvc unfreeze` (on a GPU host) and `dvc freeze`
    after it leave no other change to commit."""
    for cmd in (["git", "init", "-q"], [sys.executable, "-m", "dvc", "init", "-q"]):
        subprocess.run(cmd, cwd=tmp_path, env=ENV, check=True)
    (tmp_path / "reproduction").mkdir()
    committed = (ROOT / DVC_FILE).read_text()
    (tmp_path / DVC_FILE).write_text(committed)
    assert dvc(tmp_path, "unfreeze", f"{DVC_FILE}:measure-gpu-h100").returncode == 0
    unfrozen = (tmp_path / DVC_FILE).read_text().splitlines()
    changes = [d for d in difflib.ndiff(committed.splitlines(), unfrozen) if d[0] in "+-"]
    assert changes == ["-     frozen: true"]
    assert dvc(tmp_path, "freeze", f"{DVC_FILE}:measure-gpu-h100").returncode == 0
    assert (tmp_path / DVC_FILE).read_text() == committed


def test_the_committed_reproduction_is_up_to_date() -> None:
    """Its code, params, measurements and outputs are those dvc.lock records: after a change to any of them
    (the evaluator's protocol, the report's code), `dvc repro reproduction/dvc.yaml` and commit what it wrote."""
    status = dvc(ROOT, "status", DVC_FILE)
    assert status.returncode == 0 and "up to date" in status.stdout, (
        f"run `dvc repro {DVC_FILE}` and commit its outputs:\n{status.stdout}")


def test_the_default_pipeline_leaves_the_reproduction_out() -> None:
    from dvc.repo import Repo

    from flows.pipeline import default_target

    with Repo(str(ROOT)) as repo:
        default = {s.name for s in repo.stage.collect(default_target(ROOT))}
        everything = {s.addressing for s in repo.index.stages}
    assert "report" in default and not default & {"prepare", "gather", "measure-gpu-h100"}
    assert f"{DVC_FILE}:measure-gpu-h100" in everything


@needs_release
def test_a_release_other_than_the_prepared_one_is_refused(tmp_path: Path) -> None:
    """The same file under another name passes; any other content is refused, naming the file to get."""
    spec = read_spec(POOLS / "gpu-h100")
    carried = tmp_path / "carry" / "h100.jsonl"
    carried.parent.mkdir()
    shutil.copyfile(RELEASE, carried)
    assert len(spec_inputs(spec, carried)[1]) == spec["candidates"]
    lines = RELEASE.read_text().splitlines(keepends=True)
    carried.write_text("".join(lines[:-1]))
    with pytest.raises(DataFileError, match=r"not the release the pools were prepared from \(cuda-l1/h100.jsonl"):
        spec_inputs(spec, carried)


def _pool_copy(tmp_path: Path, pool: str, rewrite: int, keep_old: bool) -> Path:
    """A copy of a kept pool's earlier-protocol table whose first ``rewrite`` measurements (in order) carry the
    current protocol's hash; the earlier protocol's measurements kept beside them or not. (The pool's own
    current-protocol measurements are left out: each case here says how much of the pool the current protocol
    covers.)"""
    folder = tmp_path / pool
    folder.mkdir(parents=True)
    shutil.copyfile(POOLS / pool / "inputs.json", folder / "inputs.json")
    current = read_spec(folder)["config_hash"]
    kept = [e for e in load_evaluations(POOLS / pool / EARLIER_FILE) if e.config_hash == EARLIER]
    new = [replace(e, config_hash=current) for e in kept[:rewrite]]
    save_evaluations((kept if keep_old else []) + new, folder / "measurements.jsonl")
    return folder


@needs_release
def test_gather_keeps_the_earlier_protocol_until_the_current_one_is_complete(tmp_path: Path) -> None:
    half = _pool_copy(tmp_path / "half", "gpu-h100", 400, keep_old=True)
    whole = _pool_copy(tmp_path / "whole", "gpu-h200", 10**6, keep_old=True)
    gathered = gather([half, whole])
    current = gathered["config_hash"]
    (h100, h200) = gathered["pools"]
    assert h100["measured_under"] == EARLIER and h100["status"] == "completed"
    assert h100["message"].startswith(f"figures of an earlier protocol ({EARLIER}): 400 of 840 candidates measured "
                                      "under the current one so far") and measure_command("gpu-h100") in h100["message"]
    assert h200["message"] == ""
    assert h200["measured_under"] == current and h200["status"] == "completed" and h200["evaluations"] == 840
    assert protocol_note(gathered) == f" (config hashes: H100 {EARLIER}, H200 {current}; the current protocol's is {current})"
    started = _pool_copy(tmp_path / "started", "gpu-h100", 400, keep_old=False)
    (pool,) = gather([started])["pools"]
    assert pool["status"] == "partial" and pool["measured_under"] == current and pool["evaluations"] < 840
    assert measure_command("gpu-h100") in pool["message"]


@needs_release
def test_a_pool_measured_again_says_why_rows_moved_against_the_table_it_replaces(tmp_path: Path) -> None:
    """Once the current protocol has measured a whole pool beside the kept earlier one, the report lists the
    rows whose speedup moved by more than 25% between the two, each with its reason, and no reason speaks of
    a GPU's memory: one GPU kind measured both."""
    from cudal1.config import load_params
    from cudal1.reproduce import report
    from cudal1.reproduction import is_baseline

    folder = _pool_copy(tmp_path / "again", "gpu-h100", 10**6, keep_old=True)
    current = read_spec(folder)["config_hash"]
    _problems, candidates, _release = spec_inputs(read_spec(folder))
    programs = {c.candidate_id for c in candidates if not is_baseline(c.origin)}
    kept = load_evaluations(folder / "measurements.jsonl")
    slowed = next(e.problem_id for e in kept if e.candidate_id in programs and e.ok and (e.speedup or 0) > 1.5)

    def slower(e):  # that row's program, measured again at half its speed
        if e.config_hash != current or e.problem_id != slowed or e.candidate_id not in programs or not e.ok:
            return e
        return replace(e, candidate_ms=e.candidate_ms * 2, speedup=e.speedup / 2, speedup_low=e.speedup_low / 2,
                       speedup_high=e.speedup_high / 2)

    save_evaluations([slower(e) for e in kept], folder / "measurements.jsonl")
    gathered = gather([folder])
    assert gathered["pools"][0]["measured_under"] == current
    params = replace(load_params(ROOT / "reproduction.yaml", "cross_gpu"), out_dir=str(tmp_path / "report"))
    page = report(params, gathered)["markdown"].read_text()
    section = page.split(f"## Rows whose H100 (c7efd958) and H100 ({current[:8]}) speedups differ by more than 25%")
    assert len(section) == 2, page[-2000:]
    rows = [line for line in section[1].splitlines() if line.startswith(f"| {slowed} |")]
    assert len(rows) == 1 and "the program's move (2.00x slower) is the protocol's change" in rows[0], rows
    assert "memory" not in section[1] and "H200" not in section[1]


@needs_release  # a copy of the repository and two dvc repro: about 6 s on two cores
def test_dvc_repro_on_a_fresh_copy_writes_the_committed_report_again(tmp_path: Path) -> None:
    repo = fresh_copy(tmp_path)
    committed = {out: (ROOT / out).read_bytes() for out in outputs()}
    for out in committed:  # made again from the kept measurements, not found up to date
        if "/pools/" not in out:  # the pools' inputs, which the frozen stages read, are rewritten in place
            (repo / out).unlink()
    done = dvc(repo, "repro", DVC_FILE)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Running stage 'reproduction/dvc.yaml:measure-gpu-h100'" not in done.stdout  # frozen
    for out, content in committed.items():
        assert (repo / out).read_bytes() == content, out
    status = dvc(repo, "status", DVC_FILE)
    assert status.returncode == 0 and "up to date" in status.stdout, status.stdout
    changed = subprocess.run(["git", "status", "--porcelain"], cwd=repo, capture_output=True, text=True).stdout
    assert changed == "", changed  # dvc.lock too

    # A release file that is not the declared one: the pipeline stops at the first stage that reads it,
    # naming the file's source and the command that gets it; the report is left as it was.
    (tmp_path / "shared").unlink()
    (tmp_path / "shared" / "cuda-l1").mkdir(parents=True)
    lines = RELEASE.read_text().splitlines(keepends=True)
    (tmp_path / "shared" / "cuda-l1" / "h100.jsonl").write_text("".join(lines[:-1]))
    refused = dvc(repo, "repro", "--force", DVC_FILE)
    assert refused.returncode != 0
    assert "is not the declared bb3c6f83ca3502d4" in refused.stderr + refused.stdout
    assert "deepreinforce-ai/CUDA-L1 at commit 51e8356b" in refused.stderr + refused.stdout
    assert "cudal1 data fetch --to ../shared cuda-l1/h100.jsonl" in refused.stderr + refused.stdout
    assert (repo / "docs/reproduction/cross-gpu.md").read_bytes() == committed["docs/reproduction/cross-gpu.md"]
    assert json.loads((repo / "reproduction/gathered.json").read_text())["pools"][0]["status"] == "completed"


def _measure(*argv: str) -> subprocess.CompletedProcess[str]:
    """A measuring stage's command as a GPU host without DVC runs it; it must not import what those lack."""
    code = ("import sys; from cudal1.reproduce import main; main(sys.argv[1:]); "
            "heavy = {'polars', 'prefect', 'mlflow', 'dvc', 'yaml'} & {m.split('.')[0] for m in sys.modules}; "
            "assert not heavy, heavy")
    return subprocess.run([sys.executable, "-c", code, "measure", *argv], capture_output=True, text=True, timeout=600,
                          cwd=ROOT, env=ENV | {"PYTHONPATH": str(ROOT)})


@pytest.mark.slow  # two runs of the pool runner over four candidates on this CPU: about 20 s
def test_a_measuring_stage_appends_to_the_kept_measurements_and_resumes(tmp_path: Path) -> None:
    """A pool (a stand-in kind measured on `cpu`) prepared from a two-row release: the stage's command
    measures every candidate into the pool's measurements file; cut back to one, it measures only the rest;
    gather then takes the pool as complete under the current protocol."""
    from cudal1.cross_gpu import storage_key
    from cudal1.cross_gpu_pool import protocol_section
    from cudal1.data_sources import file_sha256
    from cudal1.evaluator import EvalConfig
    from cudal1.generation.templates import template_source
    from cudal1.problems import load_cudal1_release, load_starter_suite
    from cudal1.reproduction import release_inputs

    release = tmp_path / "carry" / "release.jsonl"
    release.parent.mkdir()
    rows = []
    for p in load_starter_suite()[:2]:
        level, number = (int(x) for x in p.problem_id.removeprefix("starter-L").split("-"))
        rows.append(json.dumps({"level_id": level, "task_id": number, "ref_code": p.source,
                                "custom_code": template_source(p, "inference_mode")}) + "\n")
    release.write_text("".join(rows))
    problems, candidates = release_inputs(load_cudal1_release(release), ["cuda_graph"])
    config = EvalConfig(correctness_trials=2, timing_trials=3, target_trial_ms=5.0, warmup_iters=1, remeasure=0)
    pool = tmp_path / "pools" / "gpu-x"
    pool.mkdir(parents=True)
    (pool / "inputs.json").write_text(json.dumps({
        "pool": "gpu-x", "gpu_kind": "X", "devices": ["cpu"],
        "release": {"path": str(release), "name": "release.jsonl", "sha256": file_sha256(release)},
        "baselines": ["cuda_graph"], "problems": len(problems), "candidates": len(candidates),
        "key": storage_key(problems, candidates, config), "storage": str(tmp_path / "storage"),
        "config_hash": config.hash, "protocol": protocol_section(config)}))
    first = _measure(str(pool))
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    kept = pool / "measurements.jsonl"
    assert len(load_evaluations(kept)) == len(candidates) == 4
    first_rows = load_evaluations(kept)
    # the host went away after one evaluation; an earlier protocol had measured the pool before
    save_evaluations([replace(e, config_hash="0123456789abcdef") for e in first_rows] + first_rows[:1], kept)
    old_lines = kept.read_text().splitlines(keepends=True)[:4]
    second = _measure(str(pool), "--ahead", "1")
    assert second.returncode == 0, second.stdout[-2000:] + second.stderr[-2000:]
    assert len([line for line in second.stdout.splitlines() if line.startswith("[")]) == 3  # only the rest
    assert f"4 measurements of earlier protocols moved to {pool / EARLIER_FILE}" in second.stdout
    assert (pool / EARLIER_FILE).read_text() == "".join(old_lines)  # as they were, set aside
    assert {e.config_hash for e in load_evaluations(kept)} == {config.hash} and len(load_evaluations(kept)) == 4
    assert set_earlier_aside(pool, config.hash) == 0  # nothing left to move
    (gathered,) = gather([pool])["pools"]
    assert gathered["status"] == "completed" and gathered["measured_under"] == config.hash
    assert gathered["evaluations"] == 4 and gathered["message"] == ""


def test_setting_earlier_measurements_aside_keeps_the_current_ones_and_a_half_written_line(tmp_path: Path) -> None:
    rows = [json.dumps({"config_hash": h, "n": i}) + "\n" for i, h in enumerate(["old", "new", "old", "new"])]
    (tmp_path / MEASUREMENTS).write_text("".join(rows) + '{"config_hash": "ne')  # killed mid-write
    (tmp_path / EARLIER_FILE).write_text("kept before\n")
    assert set_earlier_aside(tmp_path, "new") == 2
    assert (tmp_path / MEASUREMENTS).read_text() == rows[1] + rows[3] + '{"config_hash": "ne'
    assert (tmp_path / EARLIER_FILE).read_text() == "kept before\n" + rows[0] + rows[2]
    assert set_earlier_aside(tmp_path / "absent", "new") == 0
