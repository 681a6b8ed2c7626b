"""The static reading of load_inline calls (cudal1.evaluator.bindings): checked against the compiler
itself on this machine, and against the CUDA-L1 h100 release, whose builds failed on the H100
(docs/gpu-runs.md at 88f971b, 2026-11-23-release-210)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ext_helpers import FAST, fallback_program, fixture_problem

from cudal1.candidates import Candidate, Status
from cudal1.evaluator import evaluate_candidate
from cudal1.evaluator.bindings import binding_problems

pytestmark = pytest.mark.torch_header  # builds here skip parsing torch's headers (tests/conftest.py)

CUDAL1_H100 = Path(__file__).resolve().parents[2] / "shared" / "cuda-l1" / "h100.jsonl"

CPP = "#include <torch/extension.h>\n// scale_shift is defined in the CUDA source only\n"
UNDECLARED = fallback_program("cudal1_test_undeclared", CPP)


@pytest.mark.slow
def test_what_it_calls_unbuildable_the_compiler_refuses(ext_root: Path) -> None:
    """The claim is the compiler's: the evaluator builds the program for real, measures its fallback,
    and keeps both the compiler's words and the program's fault as read from its source."""
    (fault,) = binding_problems(UNDECLARED)
    assert "binds scale_shift, which its cpp_sources never declare" in fault
    problem = fixture_problem("scale_shift")
    result = evaluate_candidate(problem, Candidate(problem.problem_id, UNDECLARED, origin="test"), FAST,
                                extensions_root=ext_root)
    assert result.status is Status.OK and "extension_build_failed" in result.flags, result
    assert "scale_shift" in result.extra["build_error"] and "not declared" in result.extra["build_error"], result
    assert result.extra["build_fault"] == fault


def test_declared_or_computed_sources_are_not_flagged() -> None:
    declared = UNDECLARED.replace("// scale_shift is defined", "torch::Tensor scale_shift(torch::Tensor x); //")
    assert binding_problems(declared) == []
    assert binding_problems("load_inline('m', cpp_sources=make_source(), functions=['f'])") == []  # not literal
    assert binding_problems("def broken(:\n") == []


@pytest.mark.skipif(not CUDAL1_H100.exists(), reason="../shared/cuda-l1 not present")
def test_the_release_rows_whose_builds_failed_on_the_h100() -> None:
    rows = {f"L{r['level_id']}-{r['task_id']}": r["custom_code"] or "" for r in map(json.loads, CUDAL1_H100.open())}
    assert "never declare" in binding_problems(rows["L1-12"])[0]  # the launcher lives in the CUDA source only
    assert any("two modules" in p for p in binding_problems(rows["L1-42"]))  # PYBIND11_MODULE and functions=
    assert binding_problems(rows["L1-32"]) == []  # built and measured on the H100 (2026-11-23-release-210)
    flagged = [pid for pid, code in rows.items() if binding_problems(code)]
    assert len(flagged) == 66, flagged  # 63 of the H100 run's 64 failed builds, plus 3 rows rejected before building
