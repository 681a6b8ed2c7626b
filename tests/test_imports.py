"""Every module of the project imports, and the core stays free of the pipeline's stack. Cheap, so the fast
tier (`make check`) touches every module even where its behaviour is only tested in the slow tier."""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _modules(package: str) -> list[str]:
    root = importlib.import_module(package)
    return [package] + sorted(m.name for m in pkgutil.walk_packages(root.__path__, f"{package}."))


ALL = [name for package in ("cudal1", "flows", "tasks") for name in _modules(package)]


def test_every_package_is_listed() -> None:
    """The walk found the modules on disk: a package missing its __init__ or a broken walk would pass below."""
    on_disk = {p.stem for package in ("cudal1", "flows", "tasks") for p in (REPO / package).glob("*.py")}
    assert {name.rsplit(".", 1)[-1] for name in ALL} >= on_disk - {"__init__"}
    assert {"cudal1.evaluator.core", "flows.pipeline", "tasks.tracking"} <= set(ALL)


@pytest.mark.parametrize("name", ALL)
def test_module_imports(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__name__ == name and module.__file__ is not None


def test_the_core_imports_no_prefect_mlflow_or_dvc() -> None:
    """cudal1/ runs on the GPU machine with torch alone: importing all of it must not pull in the pipeline's
    tools. A fresh interpreter, since this one has imported them for the flows."""
    core = [name for name in ALL if name.split(".")[0] == "cudal1"]
    code = ("import importlib, sys\n"
            f"for name in {core!r}:\n    importlib.import_module(name)\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'prefect', 'mlflow', 'dvc'}))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]", done.stdout


def test_no_import_circles() -> None:
    """A module that imports one that imports it back (even inside a function) has no order a reader can
    follow and breaks when either moves: none in the package, the flows, the tasks or the benchmarks."""
    from structure import import_cycles, import_graph, module_files

    graph = import_graph(module_files(("cudal1", "flows", "tasks", "benchmarks")))
    assert len(graph) > 50 and graph["cudal1.evaluator.core"], "the walk found the modules and their imports"
    assert "cudal1.reports" in graph["benchmarks.release_bench"], "the benchmarks' imports are in the graph"
    assert import_cycles(graph) == []


def test_no_function_in_the_package_is_over_80_lines() -> None:
    """The project's hard limit on a function's length (docstring included)."""
    from structure import long_functions, module_files

    modules = module_files(("cudal1",))
    assert "cudal1.evaluator.core" in modules, "the walk found the package"
    assert long_functions(modules, 80) == []


def test_the_evaluator_is_small_modules_each_in_its_map() -> None:
    """At most 30 modules of at most 400 lines, and the package docstring's module map lists each one, so a
    newcomer finds every module by its role."""
    import cudal1.evaluator

    folder = REPO / "cudal1" / "evaluator"
    names = sorted(p.stem for p in folder.glob("*.py") if p.stem != "__init__")
    assert 20 <= len(names) + 1 <= 30, names
    long = {p.name: n for p in folder.glob("*.py") if (n := len(p.read_text().splitlines())) > 400}
    assert long == {}
    mapped = [line.split()[0] for line in (cudal1.evaluator.__doc__ or "").splitlines()
              if line.startswith("    ") and not line.startswith("     ") and line.split()]
    assert sorted(m for m in mapped if m in names) == names, set(names) - set(mapped)
