"""benchmarks/release_split.py: the release on several devices with one evaluating process per device,
rows split largest first beforehand, one run folder per device and the run's wall kept per call."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from scripts import BENCHMARKS, load_script

ROOT = BENCHMARKS.parent
RELEASE = ROOT.parent / "shared" / "cuda-l1" / "h100.jsonl"
COSTS = ROOT / "docs" / "benchmarks" / "two-gpu-whole-h200" / "one" / "results.jsonl"


def test_the_rows_go_largest_first_to_the_device_with_least_work() -> None:
    split = load_script("release_split").split_rows
    costs = {"a": 9.0, "b": 4.0, "c": 4.0, "d": 1.0, "e": 1.0}
    assert split(list(costs), costs, 2) == [["a", "e"], ["b", "c", "d"]]
    # without a cost: the median of those with one (here a's, so x keeps its place before a)
    assert split(["x", "a", "b"], {"a": 2.0, "b": 1.0}, 2) == [["x", "b"], ["a"]]
    assert split(list(costs), costs, 3) == [["a"], ["b", "d"], ["c", "e"]]


def _split(out: Path) -> dict:
    cmd = [sys.executable, str(BENCHMARKS / "release_split.py"), "--release", str(RELEASE), "--devices", "cpu,cpu",
           "--rows", "L1-3,L1-19", "--costs-from", str(COSTS), "--out", str(out)]
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not RELEASE.exists(), reason="../shared/cuda-l1 not present")
def test_each_device_runs_its_own_process_and_the_run_reads_as_one(tmp_path: Path) -> None:
    out = tmp_path / "split"
    call = _split(out)
    assert call["rows"] == [1, 1] and call["codes"] == [0, 0] and call["evaluations_after"] == 2
    per_device = [json.loads((out / name / "summary.json").read_text()) for name in ("0-cpu", "1-cpu")]
    assert [s["evaluations"] for s in per_device] == [1, 1]
    assert all("parent" in s for s in per_device)  # each process's own load (parent_load.py)
    ids = sorted(json.loads(line)["problem_id"] for line in (out / "results.jsonl").read_text().splitlines())
    assert ids == ["L1-19", "L1-3"]
    bench = load_script("release_bench")
    assert bench.run_summary(out) == {"evaluations": 2, "wall_s": call["wall_s"], "calls": 1, "partial": False}
    again = _split(out)  # a second call resumes: nothing is evaluated twice, and its wall is added
    assert (again["evaluations_before"], again["evaluations_after"]) == (2, 2)
    assert bench.run_summary(out)["wall_s"] == pytest.approx(call["wall_s"] + again["wall_s"])
