"""The static reading of load_inline calls (cudal1.evaluator.bindings): checked against the compiler
itself on this machine, and against the CUDA-L1 h100 release, whose builds failed on the H100 (run M)."""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import pytest

from cudal1.evaluator.bindings import binding_problems

CUDAL1_H100 = Path(__file__).resolve().parents[2] / "shared" / "cuda-l1" / "h100.jsonl"

CPP = "#include <torch/extension.h>\n// scale_shift is defined in the CUDA source only\n"
UNDECLARED = f"""
from torch.utils.cpp_extension import load_inline
cpp = {CPP!r}
ext = load_inline(name="cudal1_test_undeclared", cpp_sources=cpp, functions=["scale_shift"])
"""


def test_what_it_calls_unbuildable_the_compiler_refuses(tmp_path: Path) -> None:
    """The claim 'cannot compile with any torch' is the compiler's: build the program's call for real."""
    (problem,) = binding_problems(UNDECLARED)
    assert "binds scale_shift, which its cpp_sources never declare" in problem
    from torch.utils.cpp_extension import load_inline

    build = Path(tempfile.mkdtemp(prefix="cudal1-bindings-"))
    try:
        with pytest.raises(RuntimeError, match="Error building extension") as failure:
            load_inline(name="cudal1_test_undeclared", cpp_sources=CPP, functions=["scale_shift"],
                        build_directory=str(build))
        assert "scale_shift" in str(failure.value) and "not declared" in str(failure.value)
    finally:
        shutil.rmtree(build, ignore_errors=True)


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
    assert binding_problems(rows["L1-32"]) == []  # built and measured on the H100 (run M)
    flagged = [pid for pid, code in rows.items() if binding_problems(code)]
    assert len(flagged) == 66, flagged  # 63 of run M's 64 failed builds, plus 3 rows rejected before building
