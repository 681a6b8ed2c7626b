"""The analysis scripts' own documented commands run on the committed GPU runs: each script's docstring
shows how to run it, and a command that no longer runs is found here rather than by a reader (a join rule
in agreement_split.load once broke calls_mismatch.py over docs/benchmarks unnoticed). No GPU: these scripts
read release_eval.py's folders."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# script -> a line its documented command must print (what a reader of its docstring would look for)
EXPECTED = {
    "agreement_split": "verdict changes over 3 runs",
    "calls_mismatch": "calls per trial alike:",
    "trial_estimators": "median of the trials' ratios",
    "pool_phases": "reference 0-0.05 ms",
}


def documented_command(script: str) -> list[str]:
    """The first ``python benchmarks/<script>.py ...`` command of the script's docstring, continuation lines
    joined, with ``--json FILE`` dropped (it would write into the checkout)."""
    doc = ast.get_docstring(ast.parse((ROOT / "benchmarks" / f"{script}.py").read_text())) or ""
    found = re.search(rf"python3? (benchmarks/{script}\.py(?:[^\n]*\\\n)*[^\n]*)", doc)
    assert found, f"benchmarks/{script}.py's docstring shows no command"
    args = found.group(1).replace("\\\n", " ").split()
    if "--json" in args:
        at = args.index("--json")
        del args[at:at + 2]
    return args


@pytest.mark.parametrize("script", sorted(EXPECTED))
def test_a_scripts_documented_command_runs_on_the_committed_runs(script: str) -> None:
    args = documented_command(script)
    missing = [a for a in args[1:] if "/" in a and not a.startswith("-")
               and not all((ROOT / p).exists() for p in a.split(","))]
    if any(a.startswith("../shared/") for a in missing):
        pytest.skip(f"{missing} absent (shared reference data lives at ../shared)")
    assert not missing, f"{script}'s documented command names paths that are not there: {missing}"
    done = subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert EXPECTED[script] in done.stdout, done.stdout[-2000:]
