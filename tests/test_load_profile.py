"""benchmarks/load_profile.py runs on the GPU machine from a fresh working tree; here its loads run on the
CPU (``--device cpu``), each in a fresh process, on a two-row release file written for the test."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from cudal1.problems import load_problems

ROOT = Path(__file__).resolve().parents[1]


def test_each_load_is_profiled_in_a_fresh_process_with_its_preparation_split(tmp_path: Path) -> None:
    problems = [p for p in load_problems("starter") if p.problem_id in ("starter-L1-1", "starter-L1-2")]
    release = tmp_path / "release.jsonl"
    release.write_text("".join(json.dumps({"level_id": 1, "task_id": i + 1, "ref_code": p.source,
                                           "custom_code": p.source.replace("class Model(", "class ModelNew(")})
                               + "\n" for i, p in enumerate(problems)))
    out = tmp_path / "profile.json"
    env = os.environ | {"PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "load_profile.py"), "--release", str(release),
                           "--rows", "L1-1,L1-2", "--device", "cpu", "--json", str(out)],
                          capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    loads = json.loads(out.read_text())["loads"]
    assert set(loads) == {"L1-1", "L1-2"}
    for load in loads.values():
        assert load["ok"] is True, load
        assert set(load["prep_s"]) == {"reference", "plan", "draws", "graph"}
        assert load["wall_s"] >= sum(load["prep_s"].values()) - 0.01
        assert any(name.endswith(":record") for _, name in load["top_cumulative_s"])  # the plan's recording
