"""Problem loaders (KernelBench JSONL/folder, CUDA-L1 release, starter suite) and the starter suite itself."""

from __future__ import annotations

import ast
import hashlib
import json
import time
import types
from pathlib import Path

import pytest
import torch

from cudal1.problems import (
    SCORE_FIELDS,
    Problem,
    ProblemLoadError,
    load_cudal1_release,
    load_kernelbench_jsonl,
    load_problem_folder,
    load_starter_suite,
)

# ../shared next to the repository; tests that need it skip where it is absent (e.g. a bare CI checkout).
SHARED = Path(__file__).resolve().parents[2] / "shared"
KERNELBENCH_JSONL = SHARED / "kernelbench" / "problems.jsonl"
CUDAL1_H100 = SHARED / "cuda-l1" / "h100.jsonl"

RELU_SOURCE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
'''

STARTER = load_starter_suite()


def exec_problem(source: str, name: str = "problem_under_test") -> types.ModuleType:
    """Run a problem's source in a fresh module namespace, as the evaluator's worker would."""
    module = types.ModuleType(name)
    exec(compile(source, f"<{name}>", "exec"), module.__dict__)
    return module


def run_problem(problem: Problem, seed: int = 0) -> torch.Tensor:
    module = exec_problem(problem.source, problem.name)
    torch.manual_seed(seed)
    model = module.Model(*module.get_init_inputs())
    with torch.no_grad():
        return model(*module.get_inputs())


def starter(name: str) -> Problem:
    (match,) = [p for p in STARTER if p.name == name]
    return match


def require(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"{path} is absent (shared reference data lives at ../shared)")
    return path


# --- starter suite -------------------------------------------------------------------------------------


def test_starter_suite_loads_unique_problems_on_every_level() -> None:
    assert len(STARTER) >= 14
    ids = [p.problem_id for p in STARTER]
    assert len(set(ids)) == len(ids)
    assert {p.level for p in STARTER} == {1, 2, 3}
    assert all(p.suite == "starter" and p.problem_id.startswith(f"starter-L{p.level}-") for p in STARTER)
    assert len({p.sha256 for p in STARTER}) == len(STARTER)


@pytest.mark.parametrize("problem", STARTER, ids=lambda p: p.problem_id)
def test_starter_problem_runs_fast_and_finite(problem: Problem) -> None:
    start = time.perf_counter()
    out = run_problem(problem)
    elapsed_s = time.perf_counter() - start
    assert isinstance(out, torch.Tensor)
    assert out.dtype == torch.float32
    assert torch.isfinite(out).all()
    assert elapsed_s < 1.0, f"{problem.problem_id} took {elapsed_s:.2f} s; keep starter sizes small"


@pytest.mark.parametrize("problem", STARTER, ids=lambda p: p.problem_id)
def test_starter_problem_format(problem: Problem) -> None:
    tree = ast.parse(problem.source)
    doc = ast.get_docstring(tree)
    assert doc and "\n" not in doc.strip(), "each starter file opens with a one-line docstring"
    module = exec_problem(problem.source, problem.name)
    assert isinstance(module.get_init_inputs(), list)
    first, second = module.get_inputs(), module.get_inputs()
    assert isinstance(first, list) and all(isinstance(t, torch.Tensor) and t.device.type == "cpu" for t in first)
    # Fresh random inputs on every call, never all zeros.
    assert any(not torch.equal(a, b) for a, b in zip(first, second, strict=True))
    assert all(t.abs().sum() > 0 for t in first)


def test_constant_chain_is_constant_across_seeds() -> None:
    problem = starter("Linear_Min_Clamp_constant_zero")
    out0, out1 = run_problem(problem, seed=0), run_problem(problem, seed=1)
    assert torch.equal(out0, out1)
    assert torch.unique(out0).numel() == 1


def test_small_output_softmax_is_below_absolute_tolerance() -> None:
    problem = starter("Softmax_wide_small_output")
    for seed in range(3):
        out = run_problem(problem, seed=seed)
        assert out.abs().max() < 1e-2
        # The reason it is in the suite: an all-zeros candidate passes a plain atol=1e-2 check.
        assert torch.allclose(torch.zeros_like(out), out, atol=1e-2, rtol=1e-2)


def test_diag_matmul_shortcut_matches_reference() -> None:
    module = exec_problem(starter("Diag_matmul").source)
    torch.manual_seed(0)
    a, b = module.get_inputs()
    assert torch.allclose(module.Model()(a, b), a.unsqueeze(1) * b, atol=1e-5)


# --- KernelBench JSONL ---------------------------------------------------------------------------------


def test_kernelbench_jsonl_loads_all_levels() -> None:
    problems = load_kernelbench_jsonl(require(KERNELBENCH_JSONL))
    assert len(problems) == 250
    assert problems[0].problem_id == "L1-1" and problems[0].level == 1
    assert len({p.problem_id for p in problems}) == 250
    assert [sum(p.level == lvl for p in problems) for lvl in (1, 2, 3)] == [100, 100, 50]
    assert all(p.suite == "kernelbench" for p in problems)


def test_kernelbench_jsonl_level_filter() -> None:
    problems = load_kernelbench_jsonl(require(KERNELBENCH_JSONL), levels=[3])
    assert len(problems) == 50
    assert all(p.level == 3 and p.problem_id.startswith("L3-") for p in problems)


def test_kernelbench_jsonl_tiny_file(tmp_path: Path) -> None:
    path = tmp_path / "tiny.jsonl"
    row = {"level": 1, "problem_id": 19, "name": "ReLU", "code": RELU_SOURCE}
    path.write_text(json.dumps(row) + "\n\n")  # blank lines are skipped
    (problem,) = load_kernelbench_jsonl(path)
    assert (problem.problem_id, problem.level, problem.name, problem.source) == ("L1-19", 1, "ReLU", RELU_SOURCE)


# --- folders -------------------------------------------------------------------------------------------


def test_folder_with_level_subfolders(tmp_path: Path) -> None:
    (tmp_path / "level1").mkdir()
    (tmp_path / "level2").mkdir()
    (tmp_path / "level1" / "19_ReLU.py").write_text(RELU_SOURCE)
    (tmp_path / "level1" / "2_Other.py").write_text(RELU_SOURCE)
    (tmp_path / "level2" / "7_Chain.py").write_text(RELU_SOURCE)
    problems = load_problem_folder(tmp_path)
    assert [(p.problem_id, p.level, p.name) for p in problems] == [
        ("L1-2", 1, "Other"),
        ("L1-19", 1, "ReLU"),
        ("L2-7", 2, "Chain"),
    ]
    assert all(p.suite == "kernelbench" for p in problems)


def test_flat_folder(tmp_path: Path) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "3_ReLU.py").write_text(RELU_SOURCE)
    (folder / "b_unnumbered.py").write_text(RELU_SOURCE)
    (folder / "a_unnumbered.py").write_text(RELU_SOURCE)
    (folder / "_helpers.py").write_text("X = 1\n")  # private modules are not problems
    problems = load_problem_folder(folder)
    assert [(p.problem_id, p.name) for p in problems] == [
        ("mine-L1-3", "ReLU"),
        ("mine-L1-4", "a_unnumbered"),
        ("mine-L1-5", "b_unnumbered"),
    ]
    assert all(p.level == 1 and p.suite == "mine" for p in problems)
    assert [p.problem_id for p in load_problem_folder(folder, level=2, suite="x")][0] == "x-L2-3"


def test_folder_named_level_takes_its_level(tmp_path: Path) -> None:
    folder = tmp_path / "level2"
    folder.mkdir()
    (folder / "1_ReLU.py").write_text(RELU_SOURCE)
    (problem,) = load_problem_folder(folder, suite="kernelbench")
    assert (problem.problem_id, problem.level) == ("L2-1", 2)


def test_folder_duplicate_numbers_rejected(tmp_path: Path) -> None:
    (tmp_path / "1_A.py").write_text(RELU_SOURCE)
    (tmp_path / "01_B.py").write_text(RELU_SOURCE)
    with pytest.raises(ProblemLoadError, match="problem number 1"):
        load_problem_folder(tmp_path)


def test_empty_folder_rejected(tmp_path: Path) -> None:
    with pytest.raises(ProblemLoadError, match="no problem modules"):
        load_problem_folder(tmp_path)


# --- CUDA-L1 release -----------------------------------------------------------------------------------


def test_cudal1_release_h100() -> None:
    rows = load_cudal1_release(require(CUDAL1_H100))
    assert len(rows) == 250
    # 227 rows are non-null, but 17 of them hold the string "None": 210 rows carry a program.
    assert sum(r.candidate_source is not None for r in rows) == 210
    assert all(r.gpu == "h100" for r in rows)
    assert len({r.problem.problem_id for r in rows}) == 250
    first = rows[0]
    assert first.problem.problem_id == "L1-1" and first.problem.suite == "cudal1-h100"
    assert set(first.reported) == set(SCORE_FIELDS)
    assert first.reported["score_default"] == pytest.approx(2.75)
    assert all(v is None or isinstance(v, float) for r in rows for v in r.reported.values())
    assert sum(r.reported["score_default"] is not None for r in rows) == 227


def test_cudal1_release_tiny_file(tmp_path: Path) -> None:
    path = tmp_path / "a100.jsonl"
    row = {"level_id": 2, "task_id": 5, "ref_code": RELU_SOURCE, "custom_code": "", "score_default": 1.5}
    path.write_text(json.dumps(row) + "\n")
    (kernel,) = load_cudal1_release(path)
    assert kernel.gpu == "a100" and kernel.problem.problem_id == "L2-5"
    assert kernel.candidate_source is None  # an empty string means "no code", like null
    assert kernel.reported["score_default"] == 1.5 and kernel.reported["score_cudnn"] is None


# --- errors --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "loader", [load_kernelbench_jsonl, load_cudal1_release, load_problem_folder], ids=lambda f: f.__name__
)
def test_missing_path_names_the_path(loader, tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "problems.jsonl"
    with pytest.raises(ProblemLoadError, match="no such") as info:
        loader(missing)
    assert str(missing) in str(info.value)


def test_jsonl_row_without_model_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    code = RELU_SOURCE.replace("class Model", "class Net")
    path.write_text(json.dumps({"level": 1, "problem_id": 1, "name": "x", "code": code}) + "\n")
    with pytest.raises(ProblemLoadError, match="class Model") as info:
        load_kernelbench_jsonl(path)
    assert f"{path}:1" in str(info.value)


def test_release_row_without_model_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "h100.jsonl"
    row = {"level_id": 1, "task_id": 1, "ref_code": "import torch\n", "custom_code": None}
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(ProblemLoadError, match="class Model") as info:
        load_cudal1_release(path)
    assert str(path) in str(info.value)


def test_malformed_jsonl_row_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "broken.jsonl"
    path.write_text(json.dumps({"level": 1, "problem_id": 1, "name": "x", "code": RELU_SOURCE}) + "\n{not json\n")
    with pytest.raises(ProblemLoadError, match="not a KernelBench row") as info:
        load_kernelbench_jsonl(path)
    assert f"{path}:2" in str(info.value)


def test_folder_file_without_model_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "4_Bad.py"
    # A candidate's `class ModelNew` is not a reference `class Model`.
    bad.write_text(RELU_SOURCE.replace("class Model", "class ModelNew"))
    with pytest.raises(ProblemLoadError, match="class Model") as info:
        load_problem_folder(tmp_path)
    assert str(bad) in str(info.value)


# --- content hash --------------------------------------------------------------------------------------


def test_sha256_stable_and_tracks_source() -> None:
    problem = Problem("p-1", 1, "ReLU", RELU_SOURCE)
    assert problem.sha256 == hashlib.sha256(RELU_SOURCE.encode("utf-8")).hexdigest()
    assert problem.sha256 == Problem("other-id", 2, "renamed", RELU_SOURCE, suite="s").sha256
    assert problem.sha256 != Problem("p-1", 1, "ReLU", RELU_SOURCE + "\n# edited\n").sha256
    assert [p.sha256 for p in load_starter_suite()] == [p.sha256 for p in STARTER]
