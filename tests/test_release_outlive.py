"""benchmarks/release_outlive.sh: a release run started in its own session, so the end of the device call
that started it does not stop it, and waited for by later calls. A stand-in for release_resume.sh records
its session and writes a run's files as release_resume.sh does."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "release_outlive.sh"

STAND_IN = """ps -o sid= $$ > "$RUN/sid"
echo "$LIMIT_S ${EXTRA:-}" > "$RUN/args"
sleep 3
echo '{"problem_id": "L1-1"}' > "$RUN/results.jsonl"
echo '{"wall_s": 1.0, "evaluations_before": 0, "evaluations_after": 1, "stopped_by_limit": false}' > "$RUN/calls.jsonl"
"""


def _call(verb: str, run: Path, stand_in: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), verb], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env=os.environ | {"RUN": str(run), "RESUME": str(stand_in)} | env, check=False)


def test_a_run_started_in_its_own_session_is_waited_for(tmp_path: Path) -> None:
    stand_in = tmp_path / "resume.sh"
    stand_in.write_text(STAND_IN)
    run = tmp_path / "rel" / "cold"
    started = _call("start", run, stand_in, EXTRA="--call-pace")
    assert started.returncode == 0 and "started" in started.stdout, started
    early = _call("wait", run, stand_in, UNTIL_S="0")
    assert early.returncode == 3 and "still running" in early.stdout, early  # start did not wait for it
    done = _call("wait", run, stand_in, UNTIL_S="30")
    assert done.returncode == 0 and "done, 1 evaluations" in done.stdout, done
    own_sid = subprocess.run(["ps", "-o", "sid=", str(os.getpid())], capture_output=True, text=True).stdout.strip()
    assert (run / "sid").read_text().strip() not in ("", own_sid)  # not this process's session
    assert (run / "args").read_text().split() == ["3000", "--call-pace"]  # the run's own limit, not a call's
    again = _call("start", run, stand_in)
    assert again.returncode == 2 and "new RUN" in again.stderr, again


def test_without_a_verb_it_says_how_to_call_it(tmp_path: Path) -> None:
    out = _call("", tmp_path / "run", tmp_path / "none.sh")
    assert out.returncode == 2 and "start|wait" in out.stderr


def test_rows_of_a_run_that_stopped_unrecorded_are_not_started_over(tmp_path: Path) -> None:
    """A run killed before its record (its machine given back) left rows and no calls.jsonl: a run started on
    them would record only its own part as the whole run's wall."""
    run = tmp_path / "rel" / "cold"
    run.mkdir(parents=True)
    (run / "results.jsonl").write_text('{"problem_id": "L1-1"}\n')
    out = _call("start", run, tmp_path / "none.sh")
    assert out.returncode == 2 and "release_resume.sh" in out.stderr and not (tmp_path / "rel" / "cold.pid").exists()
