"""benchmarks/host_pace_load.py: the host's pace on the timed core against the number of busy cores."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_pace_is_read_beside_spinners_that_keep_their_cores_busy(tmp_path: Path) -> None:
    out = tmp_path / "pace.json"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "host_pace_load.py"), "--busy", "0,1", "--seconds", "0.8",
                    "--json", str(out)], check=True, cwd=ROOT, env=os.environ | {"PYTHONPATH": str(ROOT)}, timeout=120)
    report = json.loads(out.read_text())
    idle, busy, idle_again = report["rows"]
    assert [r["busy"] for r in report["rows"]] == [0, 1, 0] and idle["pace_over_idle"] == 1.0
    # the spinner ran on a core of its own, not the timed one, and kept it busy (alone about 1.0 of it;
    # the suite's other workers share the CI machine's two cores, and show in the host's busy cores too)
    assert busy["cores"] and report["timed_core"] not in busy["cores"] and busy["alive"] == 1
    assert busy["spinner_cpu_share"] > 0.25 and busy["host"]["busy_cores"]["mean"] >= 0.25
    # every reading is a pace, and the timed core is the one watched
    assert all(r["readings"] >= 20 and r["pace_ms"]["median"] > 0 for r in report["rows"])
    assert str(report["timed_core"]) in busy["host"]["watched"] and idle_again["spinner_cpu_share"] is None
